-- ---------------------------------------------------------------------------------------
-- Monthly statements and portal pages (issue 16).
--
-- account_month(account, month) is everything one account's month page needs, as jsonb;
-- my_accounts(at) the portal's first page. statement_html(account, month) renders the month
-- as one self-contained HTML page with inline SVG charts: GENCI's consumption against TC(d)
-- with the TMC bands, RWTH's three-month window per month, HLRN's quarter balance, usage by
-- resource with the year's projection. All run with the caller's rights: a portal user gets
-- their own accounts only (another account is "unknown", as if it did not exist).
-- ---------------------------------------------------------------------------------------

CREATE FUNCTION hpcacct_internal.html_escape(s text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(
                   s, '&', '&amp;'), '<', '&lt;'), '>', '&gt;'), '"', '&quot;'), '''', '&#39;')
    $$;
COMMENT ON FUNCTION hpcacct_internal.html_escape(text) IS 'Text escaped for HTML and SVG (& < > " '')';

-- An SVG chart over one x axis of labels (an empty label draws no tick). series is a jsonb
-- array of {"name", "kind": "line" | "dashed" | "bar" | "band", "color", "values": [...]}
-- (a band has "lower" and "upper" instead of "values"); null values are gaps. Each series is
-- one element of class "series" with its name in data-series. Coordinates are printed as
-- numeric: a float8's text follows the session's extra_float_digits (-15: 78 was 8e+01).
CREATE FUNCTION hpcacct_internal.svg_chart(title text, unit text, labels text[], series jsonb,
                                      width integer DEFAULT 760, height integer DEFAULT 300)
    RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        n integer := coalesce(pg_catalog.array_length(labels, 1), 0);
        left_x constant float8 := 78;
        top_y constant float8 := 34;
        plot_w float8 := width - left_x - 16;
        plot_h float8 := height - top_y - 58;
        lo float8;
        hi float8;
        step float8;
        mag float8;
        svg text;
        s jsonb;
        k integer := 0;
        bars integer;
        bar_i integer := 0;
        pts text;
        i integer;
        v float8;
        tick float8;
        legend_x float8 := left_x;
    BEGIN
        IF n = 0 OR series IS NULL OR pg_catalog.jsonb_typeof(series) <> 'array' THEN
            RAISE EXCEPTION 'svg_chart needs labels and an array of series' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        SELECT least(0, min(x)), max(x) INTO lo, hi
        FROM (SELECT (e.value #>> '{}')::float8 AS x
              FROM pg_catalog.jsonb_array_elements(series) ser,
                   LATERAL pg_catalog.jsonb_array_elements(coalesce(ser.value -> 'values', '[]') || coalesce(ser.value -> 'lower', '[]')
                                                           || coalesce(ser.value -> 'upper', '[]')) e
              WHERE pg_catalog.jsonb_typeof(e.value) = 'number') t;
        IF hi IS NULL OR hi <= lo THEN
            hi := lo + 1;
        END IF;
        -- a round step: 1, 2 or 5 times a power of ten, about five of them
        mag := power(10, floor(log((hi - lo) / 5)));
        step := CASE WHEN (hi - lo) / 5 <= mag THEN mag WHEN (hi - lo) / 5 <= 2 * mag THEN 2 * mag
                     WHEN (hi - lo) / 5 <= 5 * mag THEN 5 * mag ELSE 10 * mag END;
        step := greatest(step, 1);  -- labels are whole figures: a smaller step repeats them
        lo := floor(lo / step) * step;
        hi := ceil(hi / step) * step;
        svg := format('<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="%s" height="%s" viewBox="0 0 %s %s" '
                      'role="img" aria-label="%s">', width, height, width, height, hpcacct_internal.html_escape(title))
            || format('<rect x="0" y="0" width="%s" height="%s" fill="#ffffff"/>', width, height)
            || format('<text x="%s" y="20" font-family="sans-serif" font-size="14" font-weight="bold">%s</text>',
                      left_x::numeric, hpcacct_internal.html_escape(title))
            || format('<text x="12" y="%s" font-family="sans-serif" font-size="11" transform="rotate(-90 12 %s)" '
                      'text-anchor="middle">%s</text>', (top_y + plot_h / 2)::numeric, (top_y + plot_h / 2)::numeric,
                      hpcacct_internal.html_escape(unit));
        -- grid and y labels
        tick := lo;
        WHILE tick <= hi + step / 2 LOOP
            svg := svg || format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#dddddd"/>',
                                 left_x::numeric, round((top_y + plot_h - (tick - lo) / (hi - lo) * plot_h)::numeric, 1),
                                 (left_x + plot_w)::numeric, round((top_y + plot_h - (tick - lo) / (hi - lo) * plot_h)::numeric, 1))
                       || format('<text x="%s" y="%s" font-family="sans-serif" font-size="10" text-anchor="end">%s</text>',
                                 (left_x - 4)::numeric, round((top_y + plot_h - (tick - lo) / (hi - lo) * plot_h + 3)::numeric, 1),
                                 hpcacct_internal.notify_number(tick::numeric));
            tick := tick + step;
        END LOOP;
        svg := svg || format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333333"/>', left_x::numeric, top_y::numeric, left_x::numeric,
                             (top_y + plot_h)::numeric)
                   || format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333333"/>', left_x::numeric,
                             round((top_y + plot_h - (0 - lo) / (hi - lo) * plot_h)::numeric, 1), (left_x + plot_w)::numeric,
                             round((top_y + plot_h - (0 - lo) / (hi - lo) * plot_h)::numeric, 1));
        -- x labels
        FOR i IN 1 .. n LOOP
            CONTINUE WHEN coalesce(labels[i], '') = '';
            svg := svg || format('<text x="%s" y="%s" font-family="sans-serif" font-size="10" text-anchor="middle">%s</text>',
                                 round((left_x + (i - 0.5) * plot_w / n)::numeric, 1), (top_y + plot_h + 14)::numeric,
                                 hpcacct_internal.html_escape(labels[i]));
        END LOOP;
        SELECT count(*) INTO bars FROM jsonb_array_elements(series) e WHERE e.value ->> 'kind' = 'bar';
        FOR s IN SELECT e.value FROM jsonb_array_elements(series) e LOOP
            k := k + 1;
            IF s ->> 'kind' = 'bar' THEN
                svg := svg || format('<g class="series" data-series="%s" fill="%s">', hpcacct_internal.html_escape(s ->> 'name'),
                                     hpcacct_internal.html_escape(coalesce(s ->> 'color', '#1f77b4')));
                FOR i IN 1 .. n LOOP
                    v := (s -> 'values' ->> (i - 1))::float8;
                    CONTINUE WHEN v IS NULL;
                    svg := svg || format('<rect x="%s" y="%s" width="%s" height="%s"/>',
                        round((left_x + (i - 1) * plot_w / n + plot_w / n * (0.15 + 0.7 * bar_i / bars))::numeric, 1),
                        round((top_y + plot_h - (greatest(v, 0) - lo) / (hi - lo) * plot_h)::numeric, 1),
                        round((plot_w / n * 0.7 / bars)::numeric, 1),
                        round((abs(v) / (hi - lo) * plot_h)::numeric, 1));
                END LOOP;
                svg := svg || '</g>';
                bar_i := bar_i + 1;
            ELSIF s ->> 'kind' = 'band' THEN
                SELECT string_agg(format('%s,%s', round((left_x + (j - 0.5) * plot_w / n)::numeric, 1),
                                         round((top_y + plot_h - ((s -> 'upper' ->> (j - 1))::float8 - lo) / (hi - lo) * plot_h)::numeric, 1)),
                                  ' ' ORDER BY j)
                       || ' ' ||
                       string_agg(format('%s,%s', round((left_x + (j - 0.5) * plot_w / n)::numeric, 1),
                                         round((top_y + plot_h - ((s -> 'lower' ->> (j - 1))::float8 - lo) / (hi - lo) * plot_h)::numeric, 1)),
                                  ' ' ORDER BY j DESC)
                INTO pts
                FROM generate_series(1, n) j
                WHERE s -> 'upper' ->> (j - 1) IS NOT NULL AND s -> 'lower' ->> (j - 1) IS NOT NULL;
                svg := svg || format('<polygon class="series" data-series="%s" points="%s" fill="%s" fill-opacity="0.18" stroke="none"/>',
                                     hpcacct_internal.html_escape(s ->> 'name'), coalesce(pts, ''),
                                     hpcacct_internal.html_escape(coalesce(s ->> 'color', '#2ca02c')));
            ELSE
                SELECT string_agg(format('%s,%s', round((left_x + (j - 0.5) * plot_w / n)::numeric, 1),
                                         round((top_y + plot_h - ((s -> 'values' ->> (j - 1))::float8 - lo) / (hi - lo) * plot_h)::numeric, 1)),
                                  ' ' ORDER BY j)
                INTO pts
                FROM generate_series(1, n) j
                WHERE s -> 'values' ->> (j - 1) IS NOT NULL;
                svg := svg || format('<polyline class="series" data-series="%s" points="%s" fill="none" stroke="%s" stroke-width="2"%s/>',
                                     hpcacct_internal.html_escape(s ->> 'name'), coalesce(pts, ''),
                                     hpcacct_internal.html_escape(coalesce(s ->> 'color', '#1f77b4')),
                                     CASE WHEN s ->> 'kind' = 'dashed' THEN ' stroke-dasharray="6 4"' ELSE '' END);
            END IF;
            -- legend
            svg := svg || format('<rect x="%s" y="%s" width="12" height="12" fill="%s"%s/>', legend_x::numeric, height - 20,
                                 hpcacct_internal.html_escape(coalesce(s ->> 'color', '#1f77b4')),
                                 CASE WHEN s ->> 'kind' = 'band' THEN ' fill-opacity="0.3"' ELSE '' END)
                       || format('<text x="%s" y="%s" font-family="sans-serif" font-size="11">%s</text>', (legend_x + 16)::numeric,
                                 height - 10, hpcacct_internal.html_escape(s ->> 'name'));
            legend_x := legend_x + 26 + 6.5 * length(s ->> 'name');
        END LOOP;
        RETURN svg || '</svg>';
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.svg_chart(text, text, text[], jsonb, integer, integer) IS
    'An inline SVG chart: line, dashed, bar and band series over labelled x positions; one element of class series each';

-- The account an account_month or statement is for, as the caller may see it: the rule of
-- every account argument, require_account().
CREATE FUNCTION hpcacct_internal.visible_account(account text) RETURNS @extschema@.account
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        a @extschema@.account;
    BEGIN
        PERFORM hpcacct_internal.require_account(account, 'account_month');
        SELECT * INTO a FROM @extschema@.account x WHERE x.name = visible_account.account;
        RETURN a;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.visible_account(text) IS
    'The account row if it exists and the caller may see it, else 42704';

-- The first day of the month a statement is for: a month that has begun (in the site's time
-- zone), given as any day of it. NULL is 22004, infinity 22008, a month to come 22023.
CREATE FUNCTION hpcacct_internal.statement_month(month date) RETURNS date
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        m date;
    BEGIN
        IF month IS NULL THEN
            RAISE EXCEPTION 'a month is needed' USING ERRCODE = 'null_value_not_allowed',
                HINT = 'Name the month by any day of it, e.g. its first.';
        END IF;
        IF NOT isfinite(month) THEN
            RAISE EXCEPTION 'the month must be a finite date' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        m := date_trunc('month', month)::date;
        IF m > @extschema@.site_today() THEN
            RAISE EXCEPTION 'month % has not begun', to_char(m, 'YYYY-MM')
                USING ERRCODE = 'invalid_parameter_value', DETAIL = format('Today is %s in the site time zone.', @extschema@.site_today()),
                      HINT = 'Ask for this month or an earlier one.';
        END IF;
        RETURN m;
    END
    $$;
COMMENT ON FUNCTION hpcacct_internal.statement_month(date) IS
    'First day of the month a statement is for; refuses NULL (22004), infinity (22008) and a month that has not begun (22023)';

-- Everything one account's month page needs. Figures are taken at the end of the month (or
-- now, for the current month). Sections appear when the account has data of their kind.
CREATE FUNCTION @extschema@.account_month(account text, month date)
    RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    -- no JIT: the GENCI section is costed at millions (set-returning functions estimated at
    -- 1 000 rows each), and jit = on compiled it for 1.4 s, even with no GENCI machine to
    -- read, where the whole page takes 0.05 s without (300 000 charges)
    SET jit = off
    AS $$
    DECLARE
        a @extschema@.account := hpcacct_internal.visible_account(account);
        m date;
        m_start timestamptz;  -- instants as parameters: the ledger's BRIN index on job_end reads from them
        year_floor timestamptz;
        m_end date;
        tz text := @extschema@.site_timezone();
        upto date;
        y_start date;
        q date;
        result jsonb;
        section jsonb;
        sections jsonb := '{}';
        bank_unit text := @extschema@.setting_value('bank_unit');
    BEGIN
        m := hpcacct_internal.statement_month(month);
        m_start := m::timestamp AT TIME ZONE tz;
        year_floor := (m - interval '1 year') AT TIME ZONE tz;
        m_end := (m + interval '1 month')::date - 1;
        upto := least(m_end, @extschema@.site_today());
        y_start := date_trunc('year', m)::date;

        -- the month's charges by resource and submitter
        SELECT jsonb_build_object(
                   'by_resource', coalesce(jsonb_agg(jsonb_build_object('cluster', r.cluster, 'partition', r.partition,
                                                                        'unit', r.unit, 'amount', r.amount)
                                                     ORDER BY r.cluster, r.partition, r.unit)
                                           FILTER (WHERE r.g = 1), '[]'),
                   'by_submitter', coalesce(jsonb_agg(jsonb_build_object('cluster', r.cluster, 'partition', r.partition,
                                                                         'unit', r.unit, 'submitter', r.submitter,
                                                                         'amount', r.amount)
                                                      ORDER BY r.cluster, r.partition, r.unit, r.submitter)
                                            FILTER (WHERE r.g = 0), '[]'),
                   'total', coalesce(jsonb_object_agg(r.unit, r.amount) FILTER (WHERE r.g = 7), '{}'))
        INTO section
        -- (each submitter's line rounded to 6 decimals once; a resource's and the total are sums of
        -- those lines, so that the lines add up to them as printed, to the last digit)
        FROM (SELECT s.cluster, s.partition, s.unit, s.submitter, sum(s.amount) AS amount,
                     GROUPING(s.cluster, s.partition, s.submitter) AS g
              FROM (SELECT c.cluster, c.partition, c.unit, c.submitter, round(sum(c.amount), 6) AS amount
                    FROM @extschema@.charge_by_month c
                    -- (a job with a part in the month ended in it or later)
                    WHERE c.account = a.name AND c.month = m AND c.job_end >= m_start
                    GROUP BY c.cluster, c.partition, c.unit, c.submitter) s
              GROUP BY GROUPING SETS ((s.cluster, s.partition, s.unit, s.submitter), (s.cluster, s.partition, s.unit), (s.unit))) r;
        sections := sections || jsonb_build_object('charges', section);

        -- usage this year by resource, with the projection to the year's end
        SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'pool', u.pool, 'cluster', u.cluster, 'partition', u.partition, 'unit', u.unit,
                   'year_start', u.first_day, 'year_end', u.last_day, 'usage', round(u.usage, 6),
                   'equivalent_hours', round(u.hours, 6),
                   'usage_years', round(u.usage / h.hours, 6),
                   'core_hours', round(u.core_hours, 6), 'core_years', round(u.core_hours / h.hours, 6),
                   -- projected from the statement's last day, in the year current on that day
                   'projected_usage', round(hpcacct_internal.projected_usage(u.usage, 'current', u.elapsed, u.year_length), 6))
                   ORDER BY u.pool, u.cluster, u.partition), '[]')
        INTO section
        FROM (SELECT c.pool, c.cluster, c.partition, c.unit, y.first_day, y.last_day,
                     sum(c.amount) AS usage, sum(c.amount / nullif(r.rate, 0)::numeric) AS hours,
                     -- raw core-hours, unless charges whose cores are unknown (booked before 0.4,
                     -- of jobs no longer in the job table) still count
                     CASE WHEN coalesce(sum(c.amount) FILTER (WHERE c.core_hours IS NULL), 0) = 0
                          THEN coalesce(sum(c.core_hours), 0) END AS core_hours,
                     -- wall-clock time in the site's time zone, as usage_by_resource() counts it (a
                     -- DST change makes a day 23 or 25 hours)
                     y.length AS year_length, (upto + 1)::timestamp AT TIME ZONE tz - y.starts AS elapsed
              -- each pool's allocation year containing the month, once per pool
              FROM (SELECT p.pool, ay.first_day, ay.last_day, ay.starts, ay.length
                    FROM (SELECT DISTINCT coalesce(r.pool, r.cluster) AS pool FROM @extschema@.resource r) p
                    CROSS JOIN LATERAL @extschema@.allocation_year(p.pool, NULL, m::timestamp AT TIME ZONE tz) ay
                    OFFSET 0) y
              JOIN @extschema@.charge_by_month c ON c.pool = y.pool
              JOIN @extschema@.ledger l ON l.entry_id = c.entry_id
              JOIN @extschema@.resource r ON r.resource_id = l.resource_id
              -- (a year containing m began less than a year before it; its jobs ended since)
              WHERE c.account = a.name AND c.month >= y.first_day AND c.month > m - interval '1 year' AND c.month <= m
                AND c.job_end >= year_floor
              GROUP BY c.pool, c.cluster, c.partition, c.unit, y.first_day, y.last_day, y.starts, y.length) u
        CROSS JOIN (SELECT @extschema@.setting_value('hours_per_year')::numeric AS hours) h;
        sections := sections || jsonb_build_object('usage_by_resource', section);

        -- GENCI: per machine with allocation events this year, the status at the end of the
        -- month (allocation_status) and the days of the year for the chart
        SELECT jsonb_agg(jsonb_build_object(
                   -- (float8 figures through float_figure(): a float8 goes into jsonb as the session's
                   -- extra_float_digits prints it, with -15 a TC of 3 000.5 as 3e+03)
                   'machine', s.machine, 'alloc', st.alloc, 'tmc', hpcacct_internal.float_figure(st.tmc), 'tc', hpcacct_internal.float_figure(st.tc),
                   'consumption', hpcacct_internal.float_figure(st.consumption), 'delta', hpcacct_internal.float_figure(st.delta), 'status', st.status,
                   'days', (SELECT jsonb_agg(jsonb_build_array(dd.day, round(dd.tc::numeric, 2), round(dd.tmc::numeric, 2),
                                                               round(dd.consumption, 2)) ORDER BY dd.day)
                            FROM (SELECT c.day,
                                         (SELECT coalesce(@extschema@.tc(l.valid_from, l.valid_until, l.amount::float8, c.day, s.month_convention)
                                                          - @extschema@.tc(l.valid_from, l.valid_until, l.amount::float8, y_start - 1, s.month_convention), 0)
                                          FROM hpcacct_internal.allocation_events(a.name, s.machine, y_start, c.day) l) AS tc,
                                         (SELECT coalesce(@extschema@.tmc(l.valid_from, l.valid_until, l.amount::float8, c.day, s.month_convention), 0)
                                          FROM hpcacct_internal.allocation_events(a.name, s.machine, y_start, c.day) l) AS tmc,
                                         c.amount AS consumption
                                  FROM hpcacct_internal.charges_to_day_end(a.name, s.machine, NULL, y_start, upto) c) dd))
               ORDER BY s.machine)
        INTO section
        FROM @extschema@.regulation_machine s
        CROSS JOIN LATERAL @extschema@.allocation_status(a.name, s.machine, upto) st
        WHERE EXISTS (SELECT 1 FROM hpcacct_internal.allocation_events(a.name, s.machine, y_start, upto));
        IF section IS NOT NULL THEN
            sections := sections || jsonb_build_object('regulation', section);
        END IF;

        -- RWTH: the window quota of each month of the period up to this one
        SELECT jsonb_agg(jsonb_build_object('month', u.month, 'state', u.state, 'monthly', hpcacct_internal.float_figure(u.monthly),
                                            'remaining_prev', hpcacct_internal.float_figure(u.remaining_prev), 'consumed', hpcacct_internal.float_figure(u.consumed_current),
                                            'consumable_pct', hpcacct_internal.float_figure(u.consumable_pct), 'consumable', hpcacct_internal.float_figure(u.consumable),
                                            'unit', u.unit, 'period_start', u.period_start, 'period_end', u.period_end)
                         ORDER BY u.month)
        INTO section
        FROM @extschema@.quota_period p
        -- (months as timestamps: a series of dates steps in the session's TimeZone, where a skipped
        -- midnight moves it to 01:00 and leaves out the month of an upto on the 1st)
        CROSS JOIN LATERAL generate_series(p.period_start::timestamp, least(p.period_end, upto)::timestamp,
                                           interval '1 month') g(mon)
        CROSS JOIN LATERAL @extschema@.window_quota_usage(a.name, CASE WHEN g.mon::date = m THEN upto
                                                                         ELSE (g.mon + interval '1 month')::date - 1 END) u
        WHERE p.account = a.name AND p.period_start <= upto AND p.period_end >= y_start;
        IF section IS NOT NULL THEN
            sections := sections || jsonb_build_object('window_quota', section);
        END IF;

        -- HLRN: the quarter's allocation and the balance at the end of each day of it so far; for
        -- a bank account also a quarter without allocation in which it was charged (an expired
        -- account's late jobs: allocation 0, the balance negative)
        q := @extschema@.quarter_start(m);
        SELECT jsonb_build_object(
                   'quarter', q, 'unit', bank_unit, 'allocation', al.amount, 'state', @extschema@.account_state(a.name, upto),
                   'balance', hpcacct_internal.balance_at_end(a.name, upto),
                   'days', (SELECT jsonb_agg(jsonb_build_array(c.day, round(al.amount - c.amount, 2)) ORDER BY c.day)
                            FROM hpcacct_internal.charges_to_day_end(a.name, NULL, bank_unit, q, upto) c))
        INTO section
        FROM (SELECT coalesce(sum(l.amount), 0) AS amount, count(*) AS entries
              FROM @extschema@.ledger l
              WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer', 'refund') AND l.unit = bank_unit
                AND l.valid_from >= q AND l.valid_from < q + interval '3 months') al
        WHERE al.entries > 0
           OR (EXISTS (SELECT 1 FROM @extschema@.ledger l
                       WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer', 'refund') AND l.unit = bank_unit)
               AND EXISTS (SELECT 1 FROM @extschema@.ledger l
                           WHERE l.account = a.name AND l.kind = 'charge' AND l.unit = bank_unit
                             AND l.job_start < (upto + 1)::timestamp AT TIME ZONE tz
                             AND (l.job_end > q::timestamp AT TIME ZONE tz OR l.job_start >= q::timestamp AT TIME ZONE tz)));
        IF section IS NOT NULL THEN
            sections := sections || jsonb_build_object('bank', section);
        END IF;

        RETURN jsonb_build_object('account', a.name, 'kind', a.kind, 'description', a.description,
                                  'month', to_char(m, 'YYYY-MM'), 'figures_at', upto, 'time_zone', tz)
               || sections;
    END
    $$;
COMMENT ON FUNCTION @extschema@.account_month(text, date) IS
    'Portal page of one account''s month as jsonb: charges by resource and submitter, usage by resource with the '
    'year''s projection, GENCI regulation, RWTH window quota and HLRN bank figures where the account has them';

-- The portal's first page: every account the caller may see, with what it stands at.
CREATE FUNCTION @extschema@.my_accounts(at date DEFAULT @extschema@.site_today())
    RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        bank_unit text := @extschema@.setting_value('bank_unit');
        tz constant text := @extschema@.site_timezone();
        month_start timestamptz;  -- instants as parameters: the ledger's BRIN index on job_end reads from them
        day_end timestamptz;
        result jsonb;
    BEGIN
        IF at IS NULL THEN
            RAISE EXCEPTION 'a date is needed' USING ERRCODE = 'null_value_not_allowed',
                HINT = 'Leave the argument out for today.';
        END IF;
        IF NOT isfinite(at) THEN
            RAISE EXCEPTION 'the date must be finite' USING ERRCODE = 'datetime_field_overflow';
        END IF;
        -- (of a timestamp, not of the date's instant in the session's TimeZone: not one where
        -- the 1st's midnight is skipped, which would start the month an hour late)
        month_start := date_trunc('month', at::timestamp) AT TIME ZONE tz;
        day_end := (at + 1)::timestamp AT TIME ZONE tz;
        -- the month's charges up to the end of at (pro rata, as charge_by_month and the balance: a
        -- past day does not count the rest of its month), every account's in one pass of the ledger
        -- (rounded as a statement's lines: each submitter's on a cluster and partition to 6 decimals,
        -- then added up, so that on a month's last day it is the statement's total to the last digit)
        WITH this_month AS (
            SELECT t.account, jsonb_object_agg(t.unit, t.amount) AS amounts
            FROM (SELECT s.account, s.unit, sum(s.amount) AS amount
                  FROM (SELECT l.account, l.unit, r.cluster, r.partition, l.submitter,
                               round(sum(l.amount * @extschema@.period_share(l.job_start, l.job_end, month_start, day_end)), 6) AS amount
                        FROM @extschema@.ledger l
                        JOIN @extschema@.resource r ON r.resource_id = l.resource_id
                        WHERE l.kind = 'charge'
                          AND l.job_start < day_end AND (l.job_end > month_start OR l.job_start >= month_start)
                          -- (implied, as job_end >= job_start: the bound the BRIN index reads by)
                          AND l.job_end >= month_start
                        GROUP BY l.account, l.unit, r.cluster, r.partition, l.submitter) s
                  GROUP BY s.account, s.unit) t
            GROUP BY t.account
        ), bank AS (  -- the accounts with a deposit or transfer in the bank's unit, balances in one pass
            SELECT b.account, b.balance
            FROM hpcacct_internal.balances_at_end(
                     ARRAY(SELECT a.name FROM @extschema@.account a
                           WHERE (a.deleted_in IS NULL OR a.deleted_in > at)
                             AND EXISTS (SELECT 1 FROM @extschema@.ledger l
                                         WHERE l.account = a.name AND l.kind IN ('deposit', 'transfer') AND l.unit = bank_unit)),
                     at) b
        ), regulation AS (  -- every account's status on each machine it has allocations on this year, in one pass
            SELECT st.account,
                   jsonb_agg(jsonb_build_object('machine', st.machine, 'alloc', st.alloc,
                                                'tmc', round(st.tmc::numeric, 2), 'tc', round(st.tc::numeric, 2),
                                                'consumption', round(st.consumption::numeric, 2),
                                                'delta', round(st.delta::numeric, 2), 'status', st.status)
                             ORDER BY st.machine) AS entries
            FROM (SELECT coalesce(array_agg(a.name), '{}') AS accounts, coalesce(array_agg(s.machine), '{}') AS machines
                  FROM @extschema@.account a
                  CROSS JOIN @extschema@.regulation_machine s
                  WHERE (a.deleted_in IS NULL OR a.deleted_in > at)
                    AND EXISTS (SELECT 1 FROM hpcacct_internal.allocation_events(a.name, s.machine,
                                                                                 date_trunc('year', at)::date, at))) p
            CROSS JOIN LATERAL hpcacct_internal.allocation_statuses(p.accounts, p.machines, at) st
            GROUP BY st.account
        )
        SELECT jsonb_build_object('user', session_user, 'at', at, 'accounts', coalesce(jsonb_agg(x.item ORDER BY x.name), '[]'))
        INTO result
        FROM (SELECT a.name,
                     jsonb_strip_nulls(jsonb_build_object(
                         'account', a.name, 'kind', a.kind, 'description', a.description,
                         'role', (SELECT m.role FROM @extschema@.membership m WHERE m.account = a.name AND m.username = session_user),
                         'bank', CASE WHEN b.account IS NOT NULL
                                      THEN jsonb_build_object('state', @extschema@.account_state(a.name, at),
                                                              'balance', b.balance, 'unit', bank_unit,
                                                              'quarter', @extschema@.quarter_start(at)) END,
                         -- (float8 figures through float_figure(), under any extra_float_digits)
                         'quota', (SELECT jsonb_build_object('state', u.state, 'monthly', hpcacct_internal.float_figure(u.monthly),
                                                             'remaining_prev', hpcacct_internal.float_figure(u.remaining_prev),
                                                             'consumed', hpcacct_internal.float_figure(u.consumed_current),
                                                             'consumable_pct', hpcacct_internal.float_figure(u.consumable_pct),
                                                             'consumable', hpcacct_internal.float_figure(u.consumable),
                                                             'unit', u.unit)
                                   FROM hpcacct_internal.window_quota_usage_rows(a.name, at, true) u
                                   WHERE EXISTS (SELECT 1 FROM @extschema@.quota_period p WHERE p.account = a.name)),
                         'regulation', r.entries,
                         'this_month', tm.amounts)) AS item
              FROM @extschema@.account a
              LEFT JOIN this_month tm ON tm.account = a.name
              LEFT JOIN bank b ON b.account = a.name
              LEFT JOIN regulation r ON r.account = a.name
              WHERE a.deleted_in IS NULL OR a.deleted_in > at) x;
        RETURN result;
    END
    $$;
COMMENT ON FUNCTION @extschema@.my_accounts(date) IS
    'Portal first page as jsonb: the caller''s accounts (row-level security) with role, bank balance and state, '
    'window quota, GENCI status per machine and this month''s charges, each at the end of the day at';

-- An account's monthly statement: one self-contained HTML page (no script, no external
-- resource) with inline SVG charts, rendered from account_month().
CREATE FUNCTION @extschema@.statement_html(account text, month date)
    RETURNS text
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        d jsonb := @extschema@.account_month(account, month);
        h text;
        sec jsonb;
        r jsonb;
        labels text[];
        series jsonb;
        rows text;
        e text;
    BEGIN
        h := '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
             -- a title holds no element: the name is isolated between U+2068 and U+2069
             || format('<title>Statement %s%s%s %s</title>', chr(8296), hpcacct_internal.html_escape(d ->> 'account'), chr(8297),
                       d ->> 'month')
             || '<style>body{font-family:sans-serif;margin:24px;color:#222;background:#fff}'
                'h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ccc}'
                'table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}'
                'td.n{text-align:right}.meta{color:#555;font-size:13px}.chart{display:block;margin:8px 0}</style></head><body>'
             -- names in running text are isolated (bdi): a right-to-left mark in one does not
             -- reorder the text around it
             || format('<h1>Statement of account <bdi>%s</bdi> &mdash; %s</h1>', hpcacct_internal.html_escape(d ->> 'account'),
                       to_char((d ->> 'month' || '-01')::date, 'FMMonth YYYY'))
             || format('<p class="meta">%s account%s. Figures at the end of %s (%s).</p>',
                       hpcacct_internal.html_escape(initcap(d ->> 'kind')),
                       CASE WHEN d ->> 'description' IS NOT NULL THEN ': <bdi>' || hpcacct_internal.html_escape(d ->> 'description') || '</bdi>' ELSE '' END,
                       d ->> 'figures_at', hpcacct_internal.html_escape(d ->> 'time_zone'));

        -- the month's charges
        h := h || '<h2>Charges this month</h2>';
        IF jsonb_array_length(d -> 'charges' -> 'by_submitter') = 0 THEN
            h := h || '<p>No charges.</p>';
        ELSE
            SELECT string_agg(format('<tr><td>%s</td><td>%s</td><td>%s</td><td class="n">%s</td><td>%s</td></tr>',
                                     hpcacct_internal.html_escape(x ->> 'cluster'), hpcacct_internal.html_escape(x ->> 'partition'),
                                     hpcacct_internal.html_escape(x ->> 'submitter'),
                                     hpcacct_internal.ledger_figure((x ->> 'amount')::numeric), hpcacct_internal.html_escape(x ->> 'unit')),
                              '' ORDER BY ord)
            INTO rows FROM jsonb_array_elements(d -> 'charges' -> 'by_submitter') WITH ORDINALITY t(x, ord);
            h := h || '<table class="charges"><tr><th>cluster</th><th>partition</th><th>submitter</th><th>amount</th><th>unit</th></tr>'
                   || rows;
            SELECT string_agg(format('<tr><th colspan="3">total</th><td class="n">%s</td><td>%s</td></tr>',
                                     hpcacct_internal.ledger_figure(t.value::numeric), hpcacct_internal.html_escape(t.key)), '' ORDER BY t.key)
            INTO rows FROM jsonb_each_text(d -> 'charges' -> 'total') t;
            h := h || coalesce(rows, '') || '</table>';
        END IF;

        -- GENCI: consumption against TC(d) with the TMC bands, per machine
        FOR sec IN SELECT x FROM jsonb_array_elements(coalesce(d -> 'regulation', '[]')) x LOOP
            SELECT array_agg(CASE WHEN EXTRACT(day FROM (x ->> 0)::date) = 1 THEN to_char((x ->> 0)::date, 'Mon') ELSE '' END ORDER BY ord),
                   jsonb_build_array(
                       jsonb_build_object('name', 'TC ± TMC', 'kind', 'band', 'color', '#2ca02c',
                                          'lower', jsonb_agg((x ->> 1)::numeric - (x ->> 2)::numeric ORDER BY ord),
                                          'upper', jsonb_agg((x ->> 1)::numeric + (x ->> 2)::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'TC − 2·TMC (retraction)', 'kind', 'dashed', 'color', '#d62728',
                                          'values', jsonb_agg((x ->> 1)::numeric - 2 * (x ->> 2)::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'TC(d)', 'kind', 'line', 'color', '#555555',
                                          'values', jsonb_agg((x ->> 1)::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'consumption', 'kind', 'line', 'color', '#1f77b4',
                                          'values', jsonb_agg((x ->> 3)::numeric ORDER BY ord)))
            INTO labels, series
            FROM jsonb_array_elements(sec -> 'days') WITH ORDINALITY t(x, ord);
            h := h || format('<h2>Regulation on <bdi>%s</bdi> (GENCI)</h2>', hpcacct_internal.html_escape(sec ->> 'machine'))
                   || hpcacct_internal.svg_chart(format('Consumption against theoretical consumption on %s', sec ->> 'machine'),
                                            'hours', labels, series)
                   || format('<table class="regulation"><tr><th>Alloc</th><th>TMC</th><th>TC</th><th>consumption</th><th>&Delta;</th><th>status</th></tr>'
                             '<tr><td class="n">%s</td><td class="n">%s</td><td class="n">%s</td><td class="n">%s</td><td class="n">%s</td><td>%s</td></tr></table>',
                             hpcacct_internal.notify_number((sec ->> 'alloc')::numeric), hpcacct_internal.notify_number((sec ->> 'tmc')::numeric),
                             hpcacct_internal.notify_number((sec ->> 'tc')::numeric), hpcacct_internal.notify_number((sec ->> 'consumption')::numeric),
                             hpcacct_internal.notify_number((sec ->> 'delta')::numeric), hpcacct_internal.html_escape(sec ->> 'status'))
                   || '<p class="meta">Hours, each rounded on its own to the nearest whole hour (halves away from zero): '
                      '&Delta; (consumption &minus; TC) can differ by 1 from the difference of the rounded figures.</p>';
        END LOOP;

        -- RWTH: the three-month window per month
        IF d ? 'window_quota' THEN
            SELECT array_agg(to_char((x ->> 'month')::date, 'Mon YY') ORDER BY ord),
                   jsonb_build_array(
                       jsonb_build_object('name', 'consumed', 'kind', 'bar', 'color', '#1f77b4',
                                          'values', jsonb_agg((x ->> 'consumed')::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'monthly allowance', 'kind', 'dashed', 'color', '#555555',
                                          'values', jsonb_agg((x ->> 'monthly')::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'consumable (3-month window)', 'kind', 'line', 'color', '#ff7f0e',
                                          'values', jsonb_agg((x ->> 'consumable')::numeric ORDER BY ord)))
            INTO labels, series
            FROM jsonb_array_elements(d -> 'window_quota') WITH ORDINALITY t(x, ord);
            -- the table is the statement month's: in a month outside every period (no entry of
            -- its own), its row without quota, not the last period month's
            SELECT x INTO r FROM jsonb_array_elements(d -> 'window_quota') x
            WHERE (x ->> 'month')::date = (d ->> 'month' || '-01')::date;
            IF r IS NULL THEN
                SELECT jsonb_build_object('state', u.state, 'monthly', hpcacct_internal.float_figure(u.monthly),
                                          'remaining_prev', hpcacct_internal.float_figure(u.remaining_prev),
                                          'consumed', hpcacct_internal.float_figure(u.consumed_current),
                                          'consumable_pct', hpcacct_internal.float_figure(u.consumable_pct),
                                          'consumable', hpcacct_internal.float_figure(u.consumable), 'unit', u.unit,
                                          'period_start', u.period_start, 'period_end', u.period_end)
                INTO r
                FROM @extschema@.window_quota_usage(d ->> 'account', (d ->> 'figures_at')::date) u;
            END IF;
            h := h || '<h2>Core-hour quota (RWTH)</h2>'
                   || hpcacct_internal.svg_chart('Sliding-window quota per month', r ->> 'unit', labels, series)
                   || format('<table class="quota"><tr><th>Accounting period</th><td>%s to %s</td></tr>'
                             '<tr><th>State</th><td>%s</td></tr><tr><th>Monthly</th><td class="n">%s</td></tr>'
                             '<tr><th>Remaining of previous month</th><td class="n">%s</td></tr>'
                             '<tr><th>Consumed this month</th><td class="n">%s</td></tr>'
                             '<tr><th>Consumable (%%)</th><td class="n">%s</td></tr><tr><th>Consumable</th><td class="n">%s</td></tr></table>',
                             r ->> 'period_start', r ->> 'period_end', hpcacct_internal.html_escape(r ->> 'state'),
                             hpcacct_internal.notify_number((r ->> 'monthly')::numeric), hpcacct_internal.notify_number((r ->> 'remaining_prev')::numeric),
                             hpcacct_internal.notify_number((r ->> 'consumed')::numeric), hpcacct_internal.notify_number((r ->> 'consumable_pct')::numeric),
                             hpcacct_internal.notify_number((r ->> 'consumable')::numeric))
                   || format('<p class="meta">%s, each rounded on its own to a whole number (halves away from zero).</p>',
                             hpcacct_internal.html_escape(initcap(r ->> 'unit')));
        END IF;

        -- HLRN: the quarter's balance
        IF d ? 'bank' THEN
            sec := d -> 'bank';
            SELECT array_agg(CASE WHEN EXTRACT(day FROM (x ->> 0)::date) IN (1, 15) THEN to_char((x ->> 0)::date, 'DD Mon') ELSE '' END ORDER BY ord),
                   jsonb_build_array(
                       jsonb_build_object('name', 'allocation', 'kind', 'dashed', 'color', '#555555',
                                          'values', jsonb_agg((sec ->> 'allocation')::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'balance', 'kind', 'line', 'color', '#1f77b4',
                                          'values', jsonb_agg((x ->> 1)::numeric ORDER BY ord)))
            INTO labels, series
            FROM jsonb_array_elements(sec -> 'days') WITH ORDINALITY t(x, ord);
            h := h || format('<h2>Quarter starting %s (HLRN bank)</h2>', sec ->> 'quarter')
                   || hpcacct_internal.svg_chart('Balance of the quarter', sec ->> 'unit', labels, series)
                   || format('<table class="bank"><tr><th>allocation</th><th>balance</th><th>state</th></tr>'
                             '<tr><td class="n">%s %s</td><td class="n">%s %s</td><td>%s</td></tr></table>',
                             hpcacct_internal.ledger_figure((sec ->> 'allocation')::numeric), hpcacct_internal.html_escape(sec ->> 'unit'),
                             hpcacct_internal.ledger_figure((sec ->> 'balance')::numeric), hpcacct_internal.html_escape(sec ->> 'unit'),
                             hpcacct_internal.html_escape(sec ->> 'state'));
        END IF;

        -- usage by resource this allocation year, with the projection
        IF jsonb_array_length(d -> 'usage_by_resource') > 0 THEN
            SELECT array_agg((x ->> 'cluster') || '/' || (x ->> 'partition') ORDER BY ord),
                   jsonb_build_array(
                       jsonb_build_object('name', 'usage to date', 'kind', 'bar', 'color', '#1f77b4',
                                          'values', jsonb_agg((x ->> 'usage')::numeric ORDER BY ord)),
                       jsonb_build_object('name', 'projected for the year', 'kind', 'bar', 'color', '#aec7e8',
                                          'values', jsonb_agg((x ->> 'projected_usage')::numeric ORDER BY ord))),
                   string_agg(format('<tr><td>%s</td><td>%s</td><td>%s to %s</td><td class="n">%s</td><td class="n">%s</td>'
                                     '<td class="n">%s</td><td class="n">%s</td><td class="n">%s</td><td>%s</td></tr>',
                                     hpcacct_internal.html_escape(x ->> 'cluster'), hpcacct_internal.html_escape(x ->> 'partition'),
                                     x ->> 'year_start', x ->> 'year_end',
                                     coalesce(to_char((x ->> 'core_years')::numeric, 'FM999,999,999,999,990.000'), 'n/a'),
                                     to_char((x ->> 'equivalent_hours')::numeric, 'FM999,999,999,999,990.00'),
                                     to_char((x ->> 'usage')::numeric, 'FM999,999,999,999,990.00'),
                                     to_char((x ->> 'usage_years')::numeric, 'FM999,999,999,999,990.000'),
                                     coalesce(to_char((x ->> 'projected_usage')::numeric, 'FM999,999,999,999,990.00'), ''),
                                     hpcacct_internal.html_escape(x ->> 'unit')), '' ORDER BY ord)
            INTO labels, series, rows
            FROM jsonb_array_elements(d -> 'usage_by_resource') WITH ORDINALITY t(x, ord);
            h := h || '<h2>Usage by resource this allocation year</h2>'
                   || hpcacct_internal.svg_chart('Usage to date and projected for the year', 'charged units', labels, series)
                   || '<table class="usage"><tr><th>cluster</th><th>partition</th><th>year</th><th>core-years (raw)</th>'
                      '<th>equivalent-hours (unweighted)</th><th>usage to date</th><th>usage in unit-years</th>'
                      '<th>projected</th><th>unit</th></tr>'
                   || rows || '</table>';
        END IF;
        RETURN h || '</body></html>';
    END
    $$;
COMMENT ON FUNCTION @extschema@.statement_html(text, date) IS
    'An account''s monthly statement as one self-contained HTML page with inline SVG charts (GENCI, RWTH, HLRN, usage '
    'by resource), from account_month()';

-- The accounts whose statements hpcacct-report --all writes for a month: those the caller may
-- see (row-level security) that had, in the month, a charge, an allocation valid on one of its
-- days (grant, supplement, deposit, transfer, refund, retraction) or a sliding-window quota.
CREATE FUNCTION @extschema@.statement_accounts(month date)
    RETURNS SETOF text
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $$
    DECLARE
        tz constant text := @extschema@.site_timezone();
        m date;
    BEGIN
        m := hpcacct_internal.statement_month(month);
        RETURN QUERY
        SELECT a.name
        FROM @extschema@.account a
        WHERE EXISTS (SELECT 1 FROM @extschema@.ledger l
                      WHERE l.account = a.name AND l.kind = 'charge'
                        AND l.job_start < (m + interval '1 month')::timestamp AT TIME ZONE tz
                        AND l.job_end >= m::timestamp AT TIME ZONE tz)
           OR EXISTS (SELECT 1 FROM @extschema@.ledger l
                      WHERE l.account = a.name AND l.kind <> 'charge'
                        AND l.valid_from < (m + interval '1 month')::date AND l.valid_until >= m)
           OR EXISTS (SELECT 1 FROM @extschema@.quota_period p
                      WHERE p.account = a.name AND p.period_start < (m + interval '1 month')::date AND p.period_end >= m)
        ORDER BY a.name;
    END
    $$;
COMMENT ON FUNCTION @extschema@.statement_accounts(date) IS
    'Accounts the caller may see with a charge, an allocation or a window quota in a month: whose statements '
    'hpcacct-report --all writes';
