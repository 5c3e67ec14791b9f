#include "core/mail.hpp"

#include <algorithm>
#include <cctype>
#include <vector>

namespace hpcacct::mail {
namespace {

const char kHex[] = "0123456789ABCDEF";
const char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const std::string_view kWordStart = "=?UTF-8?";  // then Q? or B?, the text, ?=
constexpr std::size_t kWordOverhead = 12;         // "=?UTF-8?Q?" and "?="

void hex_byte(std::string &out, unsigned char c) {
    out += '=';
    out += kHex[c >> 4];
    out += kHex[c & 15];
}

std::string base64(std::string_view in) {
    std::string out;
    std::size_t i = 0;
    auto byte = [&](std::size_t k) { return static_cast<unsigned>(static_cast<unsigned char>(in[k])); };
    for (; i + 2 < in.size(); i += 3) {
        unsigned v = byte(i) << 16 | byte(i + 1) << 8 | byte(i + 2);
        for (int s : {18, 12, 6, 0}) out += kBase64[v >> s & 63];
    }
    if (i + 1 == in.size()) {
        unsigned v = byte(i) << 16;
        out += kBase64[v >> 18 & 63];
        out += kBase64[v >> 12 & 63];
        out += "==";
    } else if (i + 2 == in.size()) {
        unsigned v = byte(i) << 16 | byte(i + 1) << 8;
        for (int s : {18, 12, 6}) out += kBase64[v >> s & 63];
        out += '=';
    }
    return out;
}

bool q_literal(unsigned char c, bool phrase) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) return true;
    if (c == '!' || c == '*' || c == '+' || c == '-' || c == '/') return true;
    // in unstructured text, the other printable characters but = ? _ and space
    return !phrase && c > 0x20 && c < 0x7f && c != '=' && c != '?' && c != '_';
}

std::string q_encode(std::string_view unit, bool phrase) {
    std::string out;
    for (char ch : unit) {
        auto c = static_cast<unsigned char>(ch);
        if (c == ' ') out += '_';
        else if (q_literal(c, phrase)) out += ch;
        else hex_byte(out, c);
    }
    return out;
}

// The words of one encoding: whole characters each, the first within first_room.
std::vector<std::string> words(std::string_view text, std::size_t first_room, bool b, bool phrase) {
    std::vector<std::string> out;
    std::string raw, encoded;  // the current word's bytes and (Q) its encoded text
    std::size_t room = first_room;
    auto length = [&](std::size_t raw_size, std::size_t q_size) {
        return kWordOverhead + (b ? (raw_size + 2) / 3 * 4 : q_size);
    };
    auto flush = [&] {
        out.push_back(std::string(kWordStart) + (b ? "B?" + base64(raw) : "Q?" + encoded) + "?=");
        raw.clear();
        encoded.clear();
        room = kEncodedWord;
    };
    for (std::size_t i = 0; i < text.size();) {
        std::size_t n = utf8_length(text, i);
        std::string_view unit = text.substr(i, n);
        std::string q = b ? std::string() : q_encode(unit, phrase);
        if (!raw.empty() && length(raw.size() + n, encoded.size() + q.size()) > room) flush();
        raw += unit;
        encoded += q;
        i += n;
    }
    if (!raw.empty()) flush();
    return out;
}

std::string join(const std::vector<std::string> &ws) {
    std::string out;
    for (const std::string &w : ws) {
        if (!out.empty()) out += "\r\n ";
        out += w;
    }
    return out;
}

std::size_t last_line_length(const std::string &s, std::size_t column) {
    std::size_t nl = s.rfind("\r\n");
    return nl == std::string::npos ? column + s.size() : s.size() - nl - 2;
}

bool printable_ascii(std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

}  // namespace

std::size_t utf8_length(std::string_view s, std::size_t i) {
    auto at = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
    unsigned char c = at(i);
    std::size_t n;
    unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;       // no overlong form
        else if (c == 0xED) hi = 0x9F;  // no surrogate
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;
        else if (c == 0xF4) hi = 0x8F;  // at most U+10FFFF
    } else return 1;
    if (i + n > s.size() || at(i + 1) < lo || at(i + 1) > hi) return 1;
    for (std::size_t k = 2; k < n; ++k)
        if (at(i + k) < 0x80 || at(i + k) > 0xBF) return 1;
    return n;
}

std::string encoded_words(std::string_view text, std::size_t column, bool phrase) {
    if (text.empty()) return "";
    column = std::min<std::size_t>(column, 60);
    std::size_t first = std::min(kEncodedWord, kHeaderLine - column);
    std::string q = join(words(text, first, false, phrase));
    std::string b = join(words(text, first, true, phrase));
    std::string best = b.size() < q.size() ? b : q;
    // the first character's word longer than the first line's room (a 4-byte character after
    // a header name of 59 or 60): the words start on the next line, after a fold
    if (column + std::min(best.find("\r\n"), best.size()) > kHeaderLine) return "\r\n " + encoded_words(text, 1, phrase);
    return best;
}

std::string unstructured(std::string_view text, std::size_t column) {
    bool as_is = printable_ascii(text) && text.find("=?") == std::string_view::npos &&
                 column + text.size() <= kHeaderLine &&
                 (text.empty() || (text.front() != ' ' && text.back() != ' '));
    return as_is ? std::string(text) : encoded_words(text, column, false);
}

std::string mailbox(std::string_view display_name, std::string_view address, std::size_t column) {
    std::string addr = "<" + std::string(address) + ">";
    if (display_name.empty()) return addr;
    if (printable_ascii(display_name) && display_name.find("=?") == std::string_view::npos) {
        std::string q = "\"";
        for (char c : display_name) {
            if (c == '"' || c == '\\') q += '\\';
            q += c;
        }
        q += "\" ";
        if (column + q.size() + addr.size() <= kHeaderLine) return q + addr;
    }
    std::string name = encoded_words(display_name, column, true);
    bool room = last_line_length(name, column) + 1 + addr.size() <= kHeaderLine;
    return name + (room ? " " : "\r\n ") + addr;
}

bool fits_as_is(std::string_view text) {
    if (!text.empty() && text.back() != '\n') return false;
    std::size_t line = 0;
    for (std::size_t i = 0; i < text.size();) {
        auto c = static_cast<unsigned char>(text[i]);
        // a line read as an mbox separator would be changed (">From ") on its way
        if (line == 0 && text.substr(i, 5) == "From ") return false;
        if (c == '\n') {
            if (i > 0 && (text[i - 1] == ' ' || text[i - 1] == '\t')) return false;
            line = 0;
            ++i;
            continue;
        }
        if ((c < 0x20 && c != '\t') || c == 0x7f) return false;
        std::size_t n = utf8_length(text, i);
        if (c >= 0x80 && n == 1) return false;  // not UTF-8
        line += n;
        if (line > kLine) return false;
        i += n;
    }
    return true;
}

std::string quoted_printable(std::string_view text) {
    constexpr std::size_t kContent = 75;  // an encoded line's characters before its soft break "="
    std::string out;
    std::size_t column = 0;
    for (std::size_t i = 0; i < text.size();) {
        if (text[i] == '\n') {
            out += "\r\n";
            column = 0;
            ++i;
            continue;
        }
        std::size_t n = utf8_length(text, i);
        bool line_end = i + n == text.size() || text[i + n] == '\n';
        auto encode = [&](std::size_t at_column) {
            std::string e;
            for (std::size_t k = i; k < i + n; ++k) {
                auto c = static_cast<unsigned char>(text[k]);
                bool blank = c == ' ' || c == '\t';
                bool first = at_column == 0 && k == i;
                if (c == '=' || (c < 0x20 && c != '\t') || c >= 0x7f || (blank && line_end) ||
                    (first && c == '.') || (first && text.substr(k, 5) == "From "))
                    hex_byte(e, c);
                else
                    e += static_cast<char>(c);
            }
            return e;
        };
        std::string e = encode(column);
        if (column + e.size() > kContent) {
            out += "=\r\n";
            column = 0;
            e = encode(0);
        }
        out += e;
        column += e.size();
        i += n;
    }
    // no final LF: a soft line break, so that the transport's last CRLF adds none
    if (!text.empty() && text.back() != '\n') out += "=\r\n";
    return out;
}

Body encode_body(std::string_view text) {
    if (fits_as_is(text)) {
        bool ascii = std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
        std::string out;
        for (char c : text) {
            if (c == '\n') out += "\r\n";
            else out += c;
        }
        return {ascii ? "7bit" : "8bit", out};
    }
    return {"quoted-printable", quoted_printable(text)};
}

Envelope envelope(std::string_view address, const ToAscii &to_ascii) {
    Envelope e;
    auto ascii = [](std::string_view s) {
        return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
    };
    std::size_t at = address.rfind('@');
    // what would end the address or add a header or a recipient (the database refuses it;
    // a row written into the outbox by hand may still have it)
    bool breaks = std::any_of(address.begin(), address.end(), [](char ch) {
        auto c = static_cast<unsigned char>(ch);
        return c <= 0x20 || c == 0x7f || c == '<' || c == '>' || c == ',' || c == '"' || c == '\\';
    });
    if (at == std::string_view::npos || at == 0 || at + 1 == address.size() || breaks) {
        e.error = "\"" + std::string(address) + "\" is not an address SMTP can carry";
        return e;
    }
    std::string local(address.substr(0, at)), domain(address.substr(at + 1));
    if (!ascii(domain)) {
        std::string a_label, why;
        // UTS #46 maps fullwidth punctuation to ASCII ('＠' to '@', '＞' to '>'): an A-label is
        // letters, digits, hyphens and dots only, or it could add a recipient
        auto ldh = [](const std::string &s) {
            return std::all_of(s.begin(), s.end(), [](char c) {
                return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
            });
        };
        if (!to_ascii(domain, a_label, why) || a_label.empty() || !ldh(a_label)) {
            if (why.empty() && !a_label.empty() && !ldh(a_label)) why = "maps to \"" + a_label + "\"";
            e.error = "the domain of \"" + std::string(address) + "\" has no IDNA A-label (" +
                      (why.empty() ? std::string("not converted") : why) + ")";
            return e;
        }
        domain = a_label;
    }
    e.needs_smtputf8 = !ascii(local);
    e.address = local + "@" + domain;
    return e;
}

bool host_name(std::string_view domain) {
    if (domain.empty() || domain.size() > 253) return false;
    std::size_t start = 0;
    while (true) {
        const std::size_t dot = domain.find('.', start);
        const std::string_view label = domain.substr(start, dot == std::string_view::npos ? dot : dot - start);
        if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') return false;
        for (char c : label) {
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-')) return false;
        }
        if (dot == std::string_view::npos) return true;
        start = dot + 1;
    }
}

std::string mailbox_key(std::string_view address, const ToAscii &to_ascii) {
    // what the sender sends to; an address it cannot send stays as written
    Envelope e = envelope(address, to_ascii);
    std::string key = e.error.empty() ? e.address : std::string(address);
    std::size_t at = key.rfind('@');
    if (at == std::string::npos) return key;
    for (std::size_t i = at + 1; i < key.size(); ++i)
        if (key[i] >= 'A' && key[i] <= 'Z') key[i] = static_cast<char>(key[i] - 'A' + 'a');
    return key;
}

void SmtpTrace::line(bool sent, std::string_view text) {
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
    auto upper = [](std::string_view s) {
        std::string u(s);
        for (char &c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        return u;
    };
    std::string u = upper(text);
    if (sent && (u.rfind("EHLO ", 0) == 0 || u.rfind("HELO ", 0) == 0)) smtputf8_offered = false;
    if (sent && u.rfind("MAIL FROM:", 0) == 0)
        mail_smtputf8 = u.size() > 9 && u.compare(u.size() - 9, 9, " SMTPUTF8") == 0;
    // an EHLO answer's line "250-SMTPUTF8" or "250 SMTPUTF8"
    if (!sent && (u == "250-SMTPUTF8" || u == "250 SMTPUTF8")) smtputf8_offered = true;
}

std::string compose(const Message &m) {
    Body body = encode_body(m.body);
    std::string s;
    s += "From: " + m.from + "\r\n";
    s += "To: " + mailbox(m.to_name, m.to_address, 4) + "\r\n";
    s += "Subject: " + unstructured(m.subject, 9) + "\r\n";
    s += "Date: " + m.date + "\r\n";
    s += "Message-ID: " + m.message_id + "\r\n";
    s += "MIME-Version: 1.0\r\n";
    s += "Content-Type: text/plain; charset=UTF-8\r\n";
    s += "Content-Transfer-Encoding: " + body.encoding + "\r\n";
    s += "Auto-Submitted: auto-generated\r\n";
    s += "X-Hpcacct-Message: " + m.hpcacct_message + "\r\n";
    s += "\r\n";
    s += body.text;  // ends with CRLF, or is empty (the header's blank line ends the message)
    return s;
}

}  // namespace hpcacct::mail
