// Helpers shared by the libFuzzer targets (test/fuzz/*_fuzz.cpp).
//
// hpcacct::Error is the core's expected way to refuse an input: a target catches it and
// returns. Anything else is a finding: another exception escapes to libFuzzer (which aborts),
// a property checked with FUZZ_CHECK fails (abort), or ASan/UBSan/LeakSanitizer reports.
#pragma once

#include "core/error.hpp"
#include "core/tres.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#define FUZZ_CHECK(condition, ...)                                                             \
    do {                                                                                       \
        if (!(condition)) {                                                                    \
            std::fprintf(stderr, "%s:%d: property violated: %s\n", __FILE__, __LINE__, #condition); \
            std::fprintf(stderr, __VA_ARGS__);                                                 \
            std::fputc('\n', stderr);                                                          \
            std::abort();                                                                      \
        }                                                                                      \
    } while (0)

namespace fuzz {

// Reads fixed-size values from the front of the input; past the end it yields zeros, so
// every input, however short, is a complete test case.
class Reader {
public:
    Reader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

    std::size_t remaining() const { return size_ - pos_; }

    template <typename T>
    T take() {
        T value{};
        const std::size_t n = remaining() < sizeof(T) ? remaining() : sizeof(T);
        std::memcpy(&value, data_ + pos_, n);
        pos_ += n;
        return value;
    }

    std::uint8_t byte() { return take<std::uint8_t>(); }

    // Up to `n` bytes, fewer at the end of the input.
    std::string_view bytes(std::size_t n) {
        if (n > remaining()) n = remaining();
        std::string_view out(reinterpret_cast<const char*>(data_ + pos_), n);
        pos_ += n;
        return out;
    }

    std::string_view rest() { return bytes(remaining()); }

private:
    const std::uint8_t* data_;
    std::size_t size_;
    std::size_t pos_ = 0;
};

// A vector in the packed form the glue stores.
inline std::vector<unsigned char> packed(const hpcacct::tres::Vector& v) {
    std::vector<unsigned char> bytes(v.packed_size());
    v.pack(bytes.data());
    return bytes;
}

// Canonical text, checking that format_length is the length format writes: format throws
// when the buffer is too small, and its terminating NUL must land at out[length]. (A corrupt
// View may hold a key with NUL bytes, so strlen cannot tell.)
inline std::string formatted(const hpcacct::tres::View& view) {
    const std::size_t length = hpcacct::tres::format_length(view);
    std::string out(length + 1, '\x7f');
    hpcacct::tres::format(view, out.data(), out.size());
    FUZZ_CHECK(out[length] == '\0', "format_length %zu, format wrote %zu bytes", length, std::strlen(out.c_str()));
    out.resize(length);
    return out;
}

// Printable excerpt of an input for property messages.
inline std::string shown(std::string_view text) {
    std::string out;
    for (char c : text.substr(0, 300)) {
        if (c >= 0x20 && c < 0x7f) {
            out += c;
        } else {
            char hex[8];
            std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned char>(c));
            out += hex;
        }
    }
    if (text.size() > 300) out += "...";
    return out;
}

}  // namespace fuzz
