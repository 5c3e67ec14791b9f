// Resource vectors in Slurm's TRES syntax: "billing=4,cpu=4,gres/gpu=1,mem=16G,node=1".
//
// A vector is a sorted set of (key, value) components with value > 0; a missing key is 0.
// Memory and storage keys (mem, vmem, fs/*, bb/*) hold megabytes.
//
// Two representations:
//  - Vector: a fixed-capacity builder, trivially copyable (no heap), used to parse and
//    compute new values;
//  - View: a read-only cursor over the packed bytes the glue stores in a varlena.
// Packed layout: uint16 count, then per component: uint8 key length, key bytes,
// 8 bytes of double (native byte order, unaligned, read with memcpy).
#pragma once
#include "core/core_only.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace hpcacct::tres {

constexpr std::size_t kMaxComponents = 64;
constexpr std::size_t kMaxKeyLength = 127;
// Largest value accepted: integers stay exact up to 2^53.
constexpr double kMaxValue = 9007199254740992.0;

struct Component {
    double value;
    std::uint8_t key_length;
    char key[kMaxKeyLength + 1];

    std::string_view name() const { return {key, key_length}; }
};

class View;

class Vector {
public:
    std::size_t size() const { return count_; }
    const Component& operator[](std::size_t i) const { return items_[i]; }
    double get(std::string_view key) const;

    // Inserts a component; the key must be valid (see valid_key) and not yet present.
    // A zero value is not stored. Throws Error on a duplicate or an invalid value.
    void insert(std::string_view key, double value);

    void clear() { count_ = 0; }  // the empty vector (without touching its 9 KB of storage)

    std::size_t packed_size() const;
    void pack(unsigned char* out) const;  // writes exactly packed_size() bytes

private:
    std::uint32_t count_ = 0;
    Component items_[kMaxComponents];
};

// Iterates the components of a packed vector in key order.
class View {
public:
    View() = default;  // the empty vector
    // Throws Error(internal) if corrupt. Inline: an out-of-line constructor is emitted as an
    // alias (C1 of C2), and an alias in the bitcode installed for JIT made PostgreSQL's
    // inliner abort the backend. test/pgtap/jit.sql runs every C function under inlining.
    View(const unsigned char* data, std::size_t size)
        : body_(nullptr), count_(checked_count(data, size)) {
        body_ = data + sizeof(std::uint16_t);
    }

    std::size_t size() const { return count_; }
    bool empty() const { return count_ == 0; }
    double get(std::string_view key) const;

    class Cursor {
    public:
        bool next();  // advance to the next component; false at the end
        std::string_view key() const { return key_; }
        double value() const { return value_; }

    private:
        friend class View;
        Cursor(const unsigned char* pos, std::size_t remaining) : pos_(pos), remaining_(remaining) {}
        const unsigned char* pos_;
        std::size_t remaining_;
        std::string_view key_;
        double value_ = 0;
    };
    Cursor cursor() const { return Cursor(body_, count_); }

private:
    // The component count of a packed value, after checking its layout.
    static std::size_t checked_count(const unsigned char* data, std::size_t size);

    const unsigned char* body_ = nullptr;
    std::size_t count_ = 0;
};

// Text input; `text` need not be NUL-terminated. Throws Error(invalid_text) on bad syntax,
// Error(out_of_range) on a negative, non-finite or too large value, Error(program_limit)
// when there are more than kMaxComponents components.
void parse(std::string_view text, Vector& out);

// Canonical text: keys sorted, memory in the largest unit that keeps the number whole.
std::size_t format_length(const View& v);
void format(const View& v, char* out, std::size_t capacity);  // capacity >= format_length+1

// Builds a vector from key/value pairs received in binary form, validating each as parse does.
void insert_checked(Vector& out, std::string_view key, double value);

bool valid_key(std::string_view key);
bool is_size_key(std::string_view key);

void add(const View& a, const View& b, Vector& out);
void scale(const View& a, double factor, Vector& out);
int compare(const View& a, const View& b);

}  // namespace hpcacct::tres
