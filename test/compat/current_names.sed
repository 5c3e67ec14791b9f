# The names the current version gives objects of the previous release it renamed (the reverse of
# previous_names.sed): test/compat/site_update.sh reads a previous release's relations by them.
s/\bhpcacct\.machine_setting\b/hpcacct.regulation_machine/g
