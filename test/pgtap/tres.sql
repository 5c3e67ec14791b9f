-- The tres type's contract: SQLSTATEs of bad input, operators and support functions.
BEGIN;
SET search_path = public, hpcacct;
SELECT plan(36);

SELECT has_type('hpcacct', 'tres', 'type hpcacct.tres exists');

-- Malformed text is 22P02.
SELECT throws_ok($$SELECT 'cpu=4,,mem=1G'::hpcacct.tres$$, '22P02', NULL, 'empty component');
SELECT throws_ok($$SELECT '=4'::hpcacct.tres$$, '22P02', NULL, 'empty key');
SELECT throws_ok($$SELECT 'cpu4'::hpcacct.tres$$, '22P02', NULL, 'missing =');
SELECT throws_ok($$SELECT 'cpu=4;mem=1G'::hpcacct.tres$$, '22P02', NULL, 'junk');
SELECT throws_ok($$SELECT 'cpu=1,cpu=2'::hpcacct.tres$$, '22P02', NULL, 'duplicate key');
SELECT throws_ok($$SELECT 'mem=4Q'::hpcacct.tres$$, '22P02', NULL, 'unknown unit');
SELECT throws_ok($$SELECT 'widgets=4'::hpcacct.tres$$, '22P02', NULL, 'unknown key');
-- Values out of range are 22003.
SELECT throws_ok($$SELECT 'cpu=-4'::hpcacct.tres$$, '22003', NULL, 'negative value');
SELECT throws_ok($$SELECT 'cpu=NaN'::hpcacct.tres$$, '22003', NULL, 'NaN');
SELECT throws_ok($$SELECT 'mem=Infinity'::hpcacct.tres$$, '22003', NULL, 'infinity');
SELECT throws_ok($$SELECT ('cpu=' || repeat('9', 400))::hpcacct.tres$$, '22003', NULL, 'huge number');
SELECT throws_ok($$SELECT 'cpu=1'::hpcacct.tres * -2$$, '22003', NULL, 'negative factor');
-- Beyond 2^53 even when the decimal rounds to 2^53 as a double (it used to be stored as 2^53).
SELECT throws_ok($$SELECT 'cpu=9007199254740993'::hpcacct.tres$$, '22003', NULL, '2^53 + 1 is refused');
SELECT throws_ok($$SELECT 'mem=8796093022208.0001G'::hpcacct.tres$$, '22003', NULL, 'just over 2^53 MB in G is refused');
SELECT is('cpu=9007199254740992'::hpcacct.tres::text, 'cpu=9007199254740992', '2^53 itself is kept exactly');
-- Limits are 54000.
SELECT throws_ok($$SELECT (repeat('a', 200) || '=1')::hpcacct.tres$$, '54000', NULL, 'key too long');
SELECT throws_ok(format('SELECT %L::hpcacct.tres',
                        (SELECT string_agg('license/l' || i || '=1', ',') FROM generate_series(1, 100) i)),
                 '54000', NULL, 'too many components');
-- A very long literal gets a short message.
CREATE FUNCTION pg_temp.message_of(query text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE query;
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    RETURN SQLERRM;
END $$;
SELECT cmp_ok(length(pg_temp.message_of(format('SELECT %L::hpcacct.tres', repeat('x', 1000000)))), '<', 200,
              'a 1 MB literal gets a short message');

-- Operators.
SELECT is('cpu=4,mem=4G'::tres -> 'mem', 4096::float8, '-> returns memory in MB');
SELECT is('cpu=4'::tres -> 'gres/gpu', 0::float8, '-> returns 0 for a missing key');
SELECT is(('mem=1.5G'::tres)::text, 'mem=1536M', 'canonical memory unit');
SELECT ok('mem=1G'::tres = 'mem=1024M'::tres, 'equal memory in different units');
SELECT is(('cpu=1'::tres + 'cpu=2,mem=1G'::tres)::text, 'cpu=3,mem=1G', '+ adds components');
SELECT is((2 * 'cpu=1.5'::tres)::text, 'cpu=3', 'scalar * tres');

-- Hash and btree support so a tres can GROUP BY, DISTINCT and be indexed.
SELECT is((SELECT count(DISTINCT t) FROM (VALUES ('cpu=1'::tres), ('cpu=1,mem=0'), ('cpu=2')) v(t)),
          2::bigint, 'DISTINCT uses the canonical form');
SELECT is(hpcacct_internal.tres_hash('mem=1G'), hpcacct_internal.tres_hash('mem=1024M'), 'equal values hash equally');
SELECT ok(EXISTS (SELECT 1 FROM pg_opclass c JOIN pg_am a ON a.oid = c.opcmethod
                  WHERE c.opcintype = 'hpcacct.tres'::regtype AND a.amname = 'hash' AND c.opcdefault),
          'default hash opclass');
SELECT ok(EXISTS (SELECT 1 FROM pg_opclass c JOIN pg_am a ON a.oid = c.opcmethod
                  WHERE c.opcintype = 'hpcacct.tres'::regtype AND a.amname = 'btree' AND c.opcdefault),
          'default btree opclass');
CREATE TEMP TABLE indexed (t hpcacct.tres);
CREATE INDEX ON indexed (t);
INSERT INTO indexed SELECT ('cpu=' || i)::hpcacct.tres FROM generate_series(1, 200) i;
SET LOCAL enable_seqscan = off;
SELECT is((SELECT count(*) FROM indexed WHERE t = 'cpu=7'), 1::bigint, 'btree index lookup');
RESET enable_seqscan;

-- Sorting compressed values: the comparison runs in the sort's context, not a per-call one,
-- so it must free the copies it decompresses (1 000 values of 7.6 KB held 121 MB).
CREATE TEMP TABLE long_values AS
SELECT i, (SELECT string_agg('license/' || repeat('k', 100) || lpad(j::text, 3, '0') || '=' || (i % 97 + j), ',')
           FROM generate_series(1, 64) j)::hpcacct.tres AS t
FROM generate_series(1, 1000) i;
SELECT is((SELECT pg_column_compression(t) FROM long_values LIMIT 1), 'pglz', 'the long values are compressed');
SELECT cmp_ok((SELECT max(m) FROM (SELECT (SELECT sum(total_bytes) FROM pg_backend_memory_contexts) AS m
                                   FROM (SELECT t FROM long_values ORDER BY t) s) q),
              '<', 32 * 1024 * 1024::numeric, 'ORDER BY of compressed values frees what each comparison decompresses');

-- Equivalents and charge are immutable, parallel safe C functions.
SELECT is((SELECT provolatile::text || proparallel::text FROM pg_proc WHERE oid = 'hpcacct.equivalents'::regproc),
          'is', 'equivalents is IMMUTABLE PARALLEL SAFE');
SELECT is((SELECT provolatile::text || proparallel::text FROM pg_proc WHERE oid = 'hpcacct.charge'::regproc),
          'is', 'charge is IMMUTABLE PARALLEL SAFE');
SELECT throws_ok($$SELECT hpcacct.charge('cpu=1', '1 hour', 'cpu=1', 'NaN')$$, '22003', NULL, 'NaN rate');
SELECT throws_ok($$SELECT hpcacct.charge('cpu=1', '-1 hour', 'cpu=1', 1)$$, '22023', NULL, 'negative elapsed');

SELECT * FROM finish();
ROLLBACK;
