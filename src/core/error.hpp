// The one exception type the core throws. The glue maps `kind` to a SQLSTATE.
#pragma once
#include "core/core_only.hpp"

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace hpcacct {

enum class ErrorKind {
    invalid_text,      // malformed literal                 -> 22P02
    out_of_range,      // negative, non-finite, too large   -> 22003
    invalid_datetime,  // bad date or interval              -> 22008
    invalid_argument,  // an argument the rule cannot use   -> 22023
    undefined_object,  // unknown account, resource...      -> 42704
    program_limit,     // too many components, too long     -> 54000
    internal,          // a bug or corrupt value            -> XX000
};

class Error : public std::runtime_error {
public:
    Error(ErrorKind kind, const std::string& message, std::string detail = {})
        : std::runtime_error(message), kind_(kind), detail_(std::move(detail)) {}

    ErrorKind kind() const noexcept { return kind_; }
    const std::string& detail() const noexcept { return detail_; }

private:
    ErrorKind kind_;
    std::string detail_;
};

// At most `shown` bytes of `text` for a message, "..." marking a cut: a message never copies
// an input whole, which may be hundreds of MB. The cut falls between UTF-8 characters (half a
// character would make the message invalid in the server's encoding).
inline std::string excerpt(std::string_view text, std::size_t shown = 100) {
    if (text.size() <= shown) return std::string(text);
    std::size_t cut = shown;
    for (int back = 0; back < 3 && cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80; ++back) --cut;
    return std::string(text.substr(0, cut)) + "...";
}

}  // namespace hpcacct
