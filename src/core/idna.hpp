// A domain's IDNA A-label through libidn2 (IDNA2008 with UTS #46's non-transitional mapping,
// as browsers and MTAs use): the one conversion hpcacct-notify sends with and the database
// makes recipients unique with (hpcacct_internal.mailbox_key). Link with -lidn2.
#pragma once

#include <idn2.h>

#include <string>

namespace hpcacct::mail {

// false (and why) when the domain has no A-label; never throws but std::bad_alloc.
inline bool idna_to_ascii(const std::string &domain, std::string &a_label, std::string &why) {
    char *out = nullptr;
    int rc = idn2_to_ascii_8z(domain.c_str(), &out, IDN2_NFC_INPUT | IDN2_NONTRANSITIONAL);
    if (rc != IDN2_OK) {
        why = std::string("libidn2: ") + idn2_strerror(rc);
        return false;
    }
    a_label = out;
    idn2_free(out);
    return true;
}

}  // namespace hpcacct::mail
