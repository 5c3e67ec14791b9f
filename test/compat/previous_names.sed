# The names the previous release gave objects the current version renamed (issue 18: one
# name per area): test/compat/upgrade.sh writes the demo's parts in them to fill that release.
s/\bregulation_machine\b/machine_setting/g
s/\bregulation_year\b/theoretical_year/g
