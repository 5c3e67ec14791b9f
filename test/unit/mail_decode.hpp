// Strict decoders of what src/core/mail.cpp writes, for its unit tests and its fuzz target:
// each returns the decoded text, or why the encoded form breaks a rule (empty `why`: none).
#pragma once
#include "core/mail.hpp"

#include <string>
#include <vector>

namespace mail_decode {

struct Decoded {
    std::string text;
    std::string why;  // empty: well formed
};

inline int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// The lines of a CRLF text (a final CRLF ends the last line).
inline std::vector<std::string> lines(const std::string &s) {
    std::vector<std::string> out;
    std::size_t b = 0;
    for (std::size_t e; (e = s.find("\r\n", b)) != std::string::npos; b = e + 2) out.push_back(s.substr(b, e - b));
    if (b < s.size()) out.push_back(s.substr(b));
    return out;
}

inline bool valid_utf8(const std::string &s) {
    for (std::size_t i = 0; i < s.size();) {
        std::size_t n = hpcacct::mail::utf8_length(s, i);
        if (n == 1 && static_cast<unsigned char>(s[i]) >= 0x80) return false;
        i += n;
    }
    return true;
}

// Quoted-printable: CRLF a line break (LF), "=" CRLF a soft one, =XX a byte (upper-case hex),
// lines of at most 76 characters, no blank at a line's end, no bare CR or LF.
inline Decoded qp(const std::string &s) {
    Decoded d;
    if (!s.empty() && s.compare(s.size() - 2, 2, "\r\n") != 0) return {"", "does not end with CRLF"};
    for (const std::string &line : lines(s)) {
        if (line.size() > 76) return {"", "a line of " + std::to_string(line.size()) + " characters"};
        if (!line.empty() && (line.back() == ' ' || line.back() == '\t')) return {"", "a blank at a line's end"};
        bool soft = !line.empty() && line.back() == '=';
        std::size_t end = soft ? line.size() - 1 : line.size();
        for (std::size_t i = 0; i < end; ++i) {
            auto c = static_cast<unsigned char>(line[i]);
            if (c == '=') {
                int h = i + 2 < end ? hex(line[i + 1]) : -1;
                int l = h >= 0 ? hex(line[i + 2]) : -1;
                if (h < 0 || l < 0) return {"", "a bad escape in " + line};
                d.text += static_cast<char>(h * 16 + l);
                i += 2;
            } else if ((c >= 33 && c <= 126) || c == ' ' || c == '\t') {
                d.text += line[i];
            } else {
                return {"", "byte " + std::to_string(c) + " as it is"};
            }
        }
        if (!soft) d.text += '\n';
    }
    return d;
}

inline int base64(char c) {
    static const std::string t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    auto p = t.find(c);
    return p == std::string::npos ? -1 : static_cast<int>(p);
}

// Folded encoded words as encoded_words() writes them (words separated by CRLF SP): each
// word at most 75 characters, whole UTF-8 characters of a UTF-8 text (utf8), no line over
// 78 with the first line's column.
inline Decoded words(const std::string &s, std::size_t column, bool utf8) {
    Decoded d;
    std::size_t at = 0;
    for (const std::string &line : lines(s)) {
        if (line.size() + (at == 0 ? column : 0) > hpcacct::mail::kHeaderLine) return {"", "a long line: " + line};
        if (at == 0 && line.empty() && s.size() > 2) {  // the value starts after a fold
            ++at;
            continue;
        }
        if (at > 0 && (line.empty() || line[0] != ' ')) return {"", "a continuation without a blank: " + line};
        std::string w = at == 0 ? line : line.substr(1);
        ++at;
        if (w.size() > hpcacct::mail::kEncodedWord) return {"", "a long word: " + w};
        if (w.size() < 12 || w.compare(0, 8, "=?UTF-8?") != 0 || w.compare(w.size() - 2, 2, "?=") != 0 ||
            (w[8] != 'Q' && w[8] != 'B') || w[9] != '?')
            return {"", "not an encoded word: " + w};
        std::string text = w.substr(10, w.size() - 12), part;
        if (w[8] == 'B') {
            if (text.size() % 4 != 0) return {"", "base64 of a bad length: " + w};
            unsigned acc = 0;
            int bits = 0;
            for (std::size_t i = 0; i < text.size(); ++i) {
                if (text[i] == '=') {
                    if (i + 2 < text.size()) return {"", "padding inside: " + w};
                    break;
                }
                int v = base64(text[i]);
                if (v < 0) return {"", "not base64: " + w};
                acc = acc << 6 | static_cast<unsigned>(v);
                bits += 6;
                if (bits >= 8) {
                    bits -= 8;
                    part += static_cast<char>(acc >> bits & 0xFF);
                }
            }
        } else {
            for (std::size_t i = 0; i < text.size(); ++i) {
                auto c = static_cast<unsigned char>(text[i]);
                if (c == '_') part += ' ';
                else if (c == '=') {
                    int h = i + 2 < text.size() ? hex(text[i + 1]) : -1, l = h >= 0 ? hex(text[i + 2]) : -1;
                    if (h < 0 || l < 0) return {"", "a bad escape: " + w};
                    part += static_cast<char>(h * 16 + l);
                    i += 2;
                } else if (c > 0x20 && c < 0x7f && c != '?') {
                    part += text[i];
                } else {
                    return {"", "a raw byte in a Q word: " + w};
                }
            }
        }
        if (utf8 && !valid_utf8(part)) return {"", "a word splits a character: " + w};
        d.text += part;
    }
    return d;
}

}  // namespace mail_decode
