-- Binary input (COPY ... FORMAT binary, or a driver's binary parameters) is validated as
-- text input is: hand-made payloads that text input would refuse are refused here too.
BEGIN;
SELECT plan(8);

-- Writes a one-column binary COPY file holding `payload` (hex) and loads it into a tres column.
CREATE TEMP TABLE received (t hpcacct.tres);
CREATE FUNCTION pg_temp.receive(payload text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    -- a file of this backend's inside the cluster's own data directory, removed at the end
    path constant text := format('%s/hpcacct_tres_recv_%s.copy', current_setting('data_directory'), pg_backend_pid());
    file text;
BEGIN
    file := '5047434f50590aff0d0a00' || '00000000' || '00000000'          -- signature, flags, extension
            || '0001' || lpad(to_hex(length(payload) / 2), 8, '0') || payload   -- one tuple, one field
            || 'ffff';                                                   -- trailer
    EXECUTE format('COPY (SELECT %L) TO PROGRAM %L', file,
                   format('perl -ne ''chomp; print pack(q{H*}, $_)'' > %s', path));
    EXECUTE format('COPY received FROM %L (FORMAT binary)', path);
    RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;

-- Components: int32 count, then int32 key length, key bytes, float8 value.
SELECT is(pg_temp.receive('00000001' || '00000003' || '637075' || '4010000000000000'), 'accepted',
          'cpu=4 is received');
SELECT is((SELECT t::text FROM received), 'cpu=4', 'and reads back as cpu=4');
SELECT is(pg_temp.receive('00000001' || '00000003' || '637075' || 'bff0000000000000'), '22003',
          'a negative value is refused');
SELECT is(pg_temp.receive('00000001' || '00000003' || '637075' || '7ff8000000000000'), '22003',
          'NaN is refused');
SELECT is(pg_temp.receive('00000001' || '00000003' || '666f6f' || '3ff0000000000000'), '22P02',
          'an unknown key is refused');
SELECT is(pg_temp.receive('00000002' || '00000003' || '637075' || '3ff0000000000000'
                                     || '00000003' || '637075' || '4000000000000000'), '22P02',
          'a duplicate key is refused');
SELECT is(pg_temp.receive('00000041' || '00000003' || '637075' || '3ff0000000000000'), '22P03',
          'a component count over 64 is refused');
SELECT is(pg_temp.receive('00000001' || '00000010' || '637075' || '3ff0000000000000'), '08P01',
          'a key length past the end of the message is refused');

DO $$
BEGIN
    EXECUTE format('COPY (SELECT 1 WHERE false) TO PROGRAM %L',
                   format('rm -f -- %s/hpcacct_tres_recv_%s.copy', current_setting('data_directory'), pg_backend_pid()));
END $$;

SELECT * FROM finish();
ROLLBACK;
