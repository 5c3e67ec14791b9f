// SQL area: notifications — the mailbox an outbox address names (issue 16), as hpcacct-notify
// sends to it: one copy of a message per mailbox (outbox_claim).
#include "pg/postgres.hpp"

#include "pg/guard.hpp"

extern "C" {
#include "utils/builtins.h"
}

#include "core/idna.hpp"
#include "core/mail.hpp"

#include <cstring>
#include <string>
#include <string_view>

using hpcacct::pg::Across;
using hpcacct::pg::guarded;

namespace {

// The key, copied out of the guarded body; longer than any address SMTP carries (254).
struct Key {
    bool fits;
    std::size_t length;
    char text[1024];
};

}  // namespace

extern "C" {

// mailbox_key(address text) → text: hpcacct::mail::mailbox_key with libidn2's A-labels. A key
// that would not fit (no SMTP address is that long) is the address as it is.
PG_FUNCTION_INFO_V1(hpcacct_mailbox_key);
Datum hpcacct_mailbox_key(PG_FUNCTION_ARGS) {
    text* input = PG_GETARG_TEXT_PP(0);
    const std::string_view view(VARDATA_ANY(input), VARSIZE_ANY_EXHDR(input));
    Across<Key> key;
    key.fits = false;
    key.length = 0;
    guarded([&] {
        std::string k = hpcacct::mail::mailbox_key(view, hpcacct::mail::idna_to_ascii);
        if (k.size() < sizeof key.text && k.find('\0') == std::string::npos) {
            std::memcpy(key.text, k.data(), k.size());
            key.length = k.size();
            key.fits = true;
        }
    });
    if (!key.fits) PG_RETURN_TEXT_P(input);
    PG_RETURN_TEXT_P(cstring_to_text_with_len(key.text, static_cast<int>(key.length)));
}

}  // extern "C"
