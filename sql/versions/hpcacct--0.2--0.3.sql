-- hpcacct 0.2 -> 0.3: performance (issue 7). Every change here is also in sql/install/.
\echo Use "ALTER EXTENSION hpcacct UPDATE TO '0.3'" to load this file. \quit
