-- hpcacct 0.3 -> 0.4: security (issue 20), the sacct loader (issue 14), the first hour (issue 18).
-- Every change here is also in sql/install/.
\echo Use "ALTER EXTENSION hpcacct UPDATE TO '0.4'" to load this file. \quit
