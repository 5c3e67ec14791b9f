-- The tres type: Slurm TRES text, canonical output, operators, and bad input.
SET search_path = public, hpcacct;

-- Slurm's AllocTRES as sacct --parsable2 prints it, and the canonical form.
SELECT 'billing=4,cpu=4,gres/gpu=1,mem=16G,node=1'::tres;
SELECT 'node=1,mem=16G,cpu=4,billing=4,gres/gpu=1'::tres;          -- keys sorted
SELECT 'cpu=2,gres/gpu:a100=2,gres/gpu=2,license/matlab=1,fs/disk=10G,bb/cray=1T,energy=3600'::tres;
SELECT ''::tres AS empty, 'cpu=0,mem=0'::tres AS zeros_dropped;

-- Memory: K M G T P are powers of 1024, a bare number is MB; printed in the largest
-- unit that keeps the number whole.
SELECT t::tres AS canonical, t::tres -> 'mem' AS mb
FROM (VALUES ('mem=1.50G'), ('mem=1536'), ('mem=1536M'), ('mem=512K'), ('mem=2048G'), ('mem=1P'),
             ('mem=0.3M'), ('mem=1000M'), ('mem=32000M'), ('mem=4800M'), ('mem=1.5K')) AS v(t);

-- in(out(x)) = x, also for values that need a fraction.
SELECT t, (t::tres)::text::tres = t::tres AS round_trips
FROM (VALUES ('cpu=3.5,mem=22500M,gres/gpu=1'), ('mem=0.3M'), ('cpu=0.1'), ('mem=1.5K'),
             ('cpu=9007199254740992'), ('energy=123456789.125')) AS v(t);

-- Components; a missing key is 0.
SELECT 'cpu=4,mem=16G,gres/gpu=1'::tres -> 'cpu' AS cpu,
       'cpu=4,mem=16G,gres/gpu=1'::tres -> 'mem' AS mem_mb,
       'cpu=4,mem=16G,gres/gpu=1'::tres -> 'gres/gpu' AS gpu,
       'cpu=4,mem=16G,gres/gpu=1'::tres -> 'node' AS missing;

-- Arithmetic.
SELECT 'cpu=2,mem=4G'::tres + 'cpu=1,gres/gpu=1'::tres AS sum,
       'cpu=2,mem=4G'::tres * 2.5 AS scaled,
       0.5 * 'cpu=2,mem=4G'::tres AS scaled_left,
       'cpu=2'::tres * 0 AS times_zero;
SELECT sum(t::tres) FROM (VALUES ('cpu=1,mem=1G'), ('cpu=2'), ('gres/gpu=1,mem=512M')) AS v(t);

-- Equality on the canonical form, order, GROUP BY (hash) and DISTINCT.
SELECT 'mem=1024M'::tres = 'mem=1G'::tres AS same_memory,
       'cpu=4,gres/gpu=0'::tres = 'cpu=4'::tres AS zero_is_missing,
       'cpu=4'::tres <> 'cpu=5'::tres AS differ,
       'cpu=4'::tres < 'cpu=5'::tres AS lt,
       'cpu=4'::tres < 'cpu=4,mem=1G'::tres AS prefix_first;
SELECT t, count(*) FROM (VALUES ('mem=1G'::tres), ('mem=1024M'), ('cpu=1'), ('cpu=1,mem=0')) AS v(t)
GROUP BY t ORDER BY t;

-- Binary send/recv through COPY BINARY.
CREATE TEMP TABLE binary_out AS
    SELECT t::tres AS t FROM (VALUES ('billing=4,cpu=4,gres/gpu=1,mem=16G,node=1'), (''), ('mem=0.3M')) AS v(t);
-- A fresh file inside the cluster's own data directory (the server writes it), removed after.
SELECT format('%s/hpcacct_tres_binary_%s_%s.copy', current_setting('data_directory'), pg_backend_pid(),
              md5(clock_timestamp()::text || random()::text)) AS copy_path \gset
\set remove_copy 'rm -f -- ' :copy_path
COPY binary_out TO :'copy_path' (FORMAT binary);
CREATE TEMP TABLE binary_in (t tres);
COPY binary_in FROM :'copy_path' (FORMAT binary);
COPY (SELECT 1 WHERE false) TO PROGRAM :'remove_copy';
SELECT t, t IN (SELECT t FROM binary_out) AS same FROM binary_in;

-- Bad input: each gets a SQLSTATE, a message naming the literal, and a detail.
CREATE FUNCTION pg_temp.error_of(literal text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    detail text;
BEGIN
    PERFORM literal::hpcacct.tres;
    RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
    RETURN SQLSTATE || ' ' || SQLERRM || ' / ' || detail;
END $$;
SELECT literal, pg_temp.error_of(literal)
FROM (VALUES ('cpu=4,,mem=1G'), ('cpu=4,'), (',cpu=4'), ('=4'), ('cpu'), ('cpu='), ('cpu=four'),
             ('cpu=4x'), ('cpu=1e5'), ('cpu=4G'), ('mem=4X'), ('mem=4GB'), ('cpu=1,cpu=2'),
             ('cpu=0,cpu=1'), ('foo=1'), ('gres/=1'), ('gres/gpu:=1'), ('CPU=1'), ('cpu =1'),
             ('cpu=-1'), ('cpu=-0'), ('cpu=NaN'), ('mem=inf'), ('cpu=Infinity'), ('cpu=+1'),
             ('cpu=99999999999999999999'), ('mem=9007199254740992G'),
             ('cpu=1..2'), ('cpu=.'), ('gres/gpu:a100:x=1')) AS v(literal);
SELECT pg_temp.error_of(repeat('x', 128) || '=1') AS key_too_long;
SELECT pg_temp.error_of(string_agg('license/l' || i || '=1', ',')) AS too_many
FROM generate_series(1, 65) AS i;
SELECT pg_temp.error_of(string_agg('license/l' || i || '=1', ',')) AS sixty_four
FROM generate_series(1, 64) AS i;

-- Arithmetic out of range.
SELECT 'cpu=9007199254740992'::tres + 'cpu=9007199254740992'::tres;
SELECT 'cpu=1'::tres * -1;
SELECT 'cpu=1'::tres * 'NaN'::float8;
SELECT 'cpu=1'::tres * 'Infinity'::float8;
