// hpcacct-notify's message text (core/mail): the body's transfer encoding and the header's
// encoded words, for any bytes (names and bodies come from the database as they are).
//
// Input: one byte of options (column 0-63, phrase or not), then the text.
// Properties, for every input:
//  - encode_body: 7bit/8bit only for a text that fits as it is, and then the text with CRLF;
//    otherwise quoted-printable that the strict decoder (test/unit/mail_decode.hpp) reads
//    back to the text: lines of at most 76 characters, no blank at a line's end;
//  - every line of the body at most 998 bytes;
//  - encoded_words: words of at most 75 characters holding whole UTF-8 characters (for a
//    UTF-8 text), lines of at most 78, decoding to the text;
//  - unstructured and mailbox: the text as it is only when it is printable ASCII that fits.
#include "fuzz_support.hpp"

#include "../unit/mail_decode.hpp"
#include "core/mail.hpp"

namespace mail = hpcacct::mail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::Reader in(data, size);
    const std::uint8_t options = in.byte();
    const std::size_t column = options & 63;
    const bool phrase = (options & 64) != 0;
    const std::string text(in.rest());

    const mail::Body body = mail::encode_body(text);
    for (const std::string& line : mail_decode::lines(body.text))
        FUZZ_CHECK(line.size() <= mail::kLine, "a body line of %zu bytes", line.size());
    if (body.encoding == "quoted-printable") {
        const mail_decode::Decoded d = mail_decode::qp(body.text);
        FUZZ_CHECK(d.why.empty(), "quoted-printable: %s", d.why.c_str());
        FUZZ_CHECK(d.text == text, "quoted-printable decodes to \"%s\"", fuzz::shown(d.text).c_str());
    } else {
        FUZZ_CHECK(body.encoding == "7bit" || body.encoding == "8bit", "encoding %s", body.encoding.c_str());
        FUZZ_CHECK(mail::fits_as_is(text), "sent as it is: \"%s\"", fuzz::shown(text).c_str());
        std::string back;
        for (const std::string& line : mail_decode::lines(body.text)) back += line + "\n";
        FUZZ_CHECK(back == text, "as it is: \"%s\"", fuzz::shown(back).c_str());
    }

    const bool utf8 = mail_decode::valid_utf8(text);
    const std::string words = mail::encoded_words(text, column, phrase);
    const mail_decode::Decoded w = mail_decode::words(words, column > 60 ? 60 : column, utf8);
    FUZZ_CHECK(w.why.empty(), "encoded words: %s", w.why.c_str());
    FUZZ_CHECK(w.text == text, "encoded words decode to \"%s\"", fuzz::shown(w.text).c_str());

    const std::string subject = mail::unstructured(text, 9);
    if (subject == text && !text.empty()) {
        for (char c : text) FUZZ_CHECK(c >= 0x20 && c < 0x7f, "a raw byte %d in a subject", c);
        FUZZ_CHECK(text.size() + 9 <= mail::kHeaderLine, "a subject line of %zu", text.size() + 9);
        FUZZ_CHECK(text.find("=?") == std::string::npos, "\"=?\" left in a subject");
    } else {
        const mail_decode::Decoded s = mail_decode::words(subject, 9, utf8);
        FUZZ_CHECK(s.why.empty() && s.text == text, "subject: %s", s.why.c_str());
    }
    const std::string to = mail::mailbox(text, "a@b.example", 4);
    const std::vector<std::string> to_lines = mail_decode::lines(to);
    for (std::size_t i = 0; i < to_lines.size(); ++i)
        FUZZ_CHECK(to_lines[i].size() + (i == 0 ? 4 : 0) <= mail::kHeaderLine, "a To line of %zu", to_lines[i].size());
    for (std::size_t i = 0; i < to.size(); ++i)
        FUZZ_CHECK((to[i] != '\r' || to.compare(i, 3, "\r\n ") == 0) && (to[i] != '\n' || (i > 0 && to[i - 1] == '\r')),
                   "a CR or LF in To that does not fold: \"%s\"", fuzz::shown(to).c_str());
    return 0;
}
