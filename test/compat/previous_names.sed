# The names the previous release gave objects the current version renamed (issue 18: one
# name per area): test/compat/upgrade.sh writes the demo's parts in them to fill that release.
s/\bregulation_machine\b/machine_setting/g
s/\bregulation_year\b/theoretical_year/g
# ledger.pool (an allocation's pool) was the allocation row's cluster
s/\(INSERT INTO \(hpcacct\.\)\{0,1\}ledger (account, kind, amount, unit, \)pool,/\1cluster,/
s/\bl\.pool = '/l.cluster = '/g
s/\(kind = 'retraction' AND \)pool = '/\1cluster = '/g
