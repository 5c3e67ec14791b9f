// A notification as an Internet message (RFC 5322, MIME): header fields folded into lines of
// at most 78 characters, RFC 2047 encoded words of at most 75, and a text/plain body whose
// every line fits SMTP's 998 bytes and decodes to the outbox's text byte for byte. Used by
// hpcacct-notify; no libcurl and no libpq here.
#pragma once
#include "core/core_only.hpp"

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace hpcacct::mail {

// Header lines stay within this many characters (RFC 5322's recommendation); an encoded
// word within 75 (RFC 2047); any line within 998 bytes (RFC 5321, RFC 5322).
inline constexpr std::size_t kHeaderLine = 78;
inline constexpr std::size_t kEncodedWord = 75;
inline constexpr std::size_t kLine = 998;

// The length of the UTF-8 character at s[i]: 1 to 4, or 1 for a byte that starts no valid
// character (an invalid byte is a character of its own: nothing is lost or split).
std::size_t utf8_length(std::string_view s, std::size_t i);

// text as RFC 2047 encoded words (UTF-8; Q or B, whichever is shorter), each at most 75
// characters and holding whole characters, folded with CRLF SP so that no line exceeds 78;
// column: the characters already on the first line ("Subject: " is 9; at most 60; where the
// first character's word does not fit after them, the value starts with the fold). phrase:
// the words stand in a display name (Q then encodes all but letters, digits and !*+-/).
std::string encoded_words(std::string_view text, std::size_t column, bool phrase);

// An unstructured header's value (Subject): the text as it is when it is printable ASCII,
// fits on the line and could not be read as encoded words; encoded words otherwise.
std::string unstructured(std::string_view text, std::size_t column);

// A mailbox (To): "name" <address>, the name as a quoted string or as encoded words, the
// address on a line of its own when the name's last line has no room for it.
std::string mailbox(std::string_view display_name, std::string_view address, std::size_t column);

// Whether text can go as it is (7bit or 8bit): UTF-8 with no control but tab, no line over
// 998 bytes, no blank at a line's end, no line starting "From ", and a final LF (or nothing).
bool fits_as_is(std::string_view text);

// Quoted-printable (RFC 2045): LF is a line break (CRLF), every other byte is kept exactly
// (a CR as =0D), encoded lines of at most 76 characters that split no =XX and, where it
// fits, no UTF-8 character; a line's final blank, a line's leading '.' and "From " are
// encoded; a text without a final LF ends with a soft line break.
std::string quoted_printable(std::string_view text);

// A text/plain body: as it is (7bit, 8bit) when it fits, quoted-printable otherwise.
struct Body {
    std::string encoding;  // the Content-Transfer-Encoding
    std::string text;      // CRLF line ends
};
Body encode_body(std::string_view text);

// An address as the envelope and the To header carry it (RFC 5321, RFC 6531): the local part
// as it is, a domain that is not ASCII as its A-label (IDNA, "xn--"). A local part that is not
// ASCII can go only to a server that offers SMTPUTF8, with MAIL FROM's SMTPUTF8 parameter.
struct Envelope {
    std::string address;          // empty when it cannot be sent; error says why
    bool needs_smtputf8 = false;  // the local part is not ASCII
    std::string error;
};
// to_ascii(domain, a_label, why): a domain's A-label form; false (and why) when it has none.
using ToAscii = std::function<bool(const std::string &, std::string &, std::string &)>;
Envelope envelope(std::string_view address, const ToAscii &to_ascii);

// Whether an ASCII domain is a host name SMTP takes (RFC 5321's Domain): labels of 1 to 63
// letters, digits and hyphens, none beginning or ending with a hyphen, separated by single
// dots, at most 253 characters in all.
bool host_name(std::string_view domain);

// The mailbox an address names, as one key: two addresses with the same key get one copy of a
// message. The address as envelope() sends it -- the local part as written (RFC 5321: only
// the receiving host may read it another way), an internationalized domain as its A-label --
// with the domain in lower case (DNS names are case-insensitive). An address envelope()
// refuses is kept as written, its domain in lower case.
std::string mailbox_key(std::string_view address, const ToAscii &to_ascii);

// What an SMTP dialogue showed, line by line (commands sent, answers received): whether the
// server's last EHLO offered SMTPUTF8, and whether the last MAIL FROM carried it. A connection
// that is reused sends no new EHLO: what its EHLO offered stands.
struct SmtpTrace {
    bool smtputf8_offered = false;
    bool mail_smtputf8 = false;
    void line(bool sent, std::string_view text);
};

struct Message {
    std::string from, to_name, to_address, subject, date, message_id, hpcacct_message, body;
};
// The whole message, header and body, with CRLF line ends.
std::string compose(const Message &m);

}  // namespace hpcacct::mail
