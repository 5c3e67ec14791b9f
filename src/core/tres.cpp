#include "core/tres.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <string>

namespace hpcacct::tres {
namespace {

constexpr std::string_view kPlainKeys[] = {"billing", "cpu", "energy", "mem", "node", "pages", "vmem"};
constexpr std::string_view kFamilies[] = {"bb/", "fs/", "gres/", "ic/", "license/"};

// Size units as powers of 1024 relative to megabytes, largest first.
struct Unit {
    char letter;
    int power;
};
constexpr Unit kUnits[] = {{'P', 3}, {'T', 2}, {'G', 1}, {'M', 0}, {'K', -1}};

bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.' || c == '+' || c == '@';
}

bool valid_name(std::string_view name) {
    return !name.empty() && std::all_of(name.begin(), name.end(), name_char);
}

bool starts_with(std::string_view s, std::string_view prefix) {
    return s.substr(0, prefix.size()) == prefix;
}

std::string quoted_literal(std::string_view text) { return "\"" + excerpt(text) + "\""; }

[[noreturn]] void syntax_error(std::string_view text, const std::string& detail) {
    throw Error(ErrorKind::invalid_text, "invalid input syntax for type tres: " + quoted_literal(text), detail);
}

[[noreturn]] void range_error(std::string_view text, const std::string& detail) {
    throw Error(ErrorKind::out_of_range, "value out of range for type tres: " + quoted_literal(text), detail);
}

double read_double(const unsigned char* p) {
    double v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

bool equals_ignoring_case(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        char c = a[i];
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
        if (c != b[i]) return false;
    }
    return true;
}

bool non_finite_word(std::string_view token) {
    if (!token.empty() && (token[0] == '+' || token[0] == '-')) token.remove_prefix(1);
    return equals_ignoring_case(token, "nan") || equals_ignoring_case(token, "inf") ||
           equals_ignoring_case(token, "infinity");
}

// 2^exponent in decimal (0 <= exponent <= 63), by doubling a digit string: computed once, at
// the first call (it used to be computed per component, most of the cost of tres input).
const std::string& power_of_two_in_decimal(int exponent) {
    static const std::array<std::string, 64> table = [] {
        std::array<std::string, 64> powers;
        std::string value = "1";
        for (std::string& power : powers) {
            power = value;
            int carry = 0;
            for (auto it = value.rbegin(); it != value.rend(); ++it) {
                const int d = (*it - '0') * 2 + carry;
                *it = static_cast<char>('0' + d % 10);
                carry = d / 10;
            }
            if (carry != 0) value.insert(value.begin(), static_cast<char>('0' + carry));
        }
        return powers;
    }();
    if (exponent < 0 || exponent >= static_cast<int>(table.size())) {
        throw Error(ErrorKind::internal, "power of two out of the table's range");
    }
    return table[static_cast<std::size_t>(exponent)];
}

// Whether the decimal digits[.fraction] (no sign, no exponent, at least one digit) exceed
// 2^exponent exactly. from_chars rounds to the nearest double, so 9007199254740993 reads as
// 2^53 and a check on the double alone would store it as 9007199254740992: compare the text.
bool decimal_exceeds_power_of_two(std::string_view number, int exponent) {
    const std::string& limit = power_of_two_in_decimal(exponent);
    const std::size_t dot = number.find('.');
    std::string_view whole = number.substr(0, dot);
    const std::string_view fraction = dot == std::string_view::npos ? std::string_view() : number.substr(dot + 1);
    while (whole.size() > 1 && whole.front() == '0') whole.remove_prefix(1);
    if (whole.size() != limit.size()) return whole.size() > limit.size();
    const int order = whole.compare(limit);
    if (order != 0) return order > 0;
    return fraction.find_first_not_of('0') != std::string_view::npos;  // equal whole part
}

// Parses the value of one component; `literal` is the whole input, for messages.
double parse_value(std::string_view literal, std::string_view key, std::string_view token) {
    const auto component = [&] { return std::string(key) + "=" + excerpt(token); };  // for messages only
    if (token.empty()) syntax_error(literal, "component \"" + component() + "\" has no value");
    if (non_finite_word(token)) range_error(literal, "\"" + std::string(key) + "\" is not a finite number");
    if (token[0] == '-') range_error(literal, "\"" + std::string(key) + "\" must not be negative");

    std::size_t digits_end = 0;
    bool seen_digit = false, seen_dot = false;
    for (; digits_end < token.size(); ++digits_end) {
        char c = token[digits_end];
        if (c >= '0' && c <= '9') {
            seen_digit = true;
        } else if (c == '.' && !seen_dot) {
            seen_dot = true;
        } else {
            break;
        }
    }
    if (!seen_digit) syntax_error(literal, "\"" + component() + "\" is not a number");

    std::string_view suffix = token.substr(digits_end);
    int power = 0;
    if (!suffix.empty()) {
        if (!is_size_key(key)) {
            syntax_error(literal, "junk after the number in \"" + component() + "\"" +
                                      (suffix.size() == 1 && std::isalpha(static_cast<unsigned char>(suffix[0]))
                                           ? " (unit suffixes are only for memory and storage keys)"
                                           : ""));
        }
        const Unit* unit = nullptr;
        if (suffix.size() == 1) {
            for (const Unit& u : kUnits) {
                if (std::toupper(static_cast<unsigned char>(suffix[0])) == u.letter) unit = &u;
            }
        }
        if (unit == nullptr) {
            syntax_error(literal, "unknown unit \"" + excerpt(suffix) + "\" in \"" + component() +
                                      "\" (expected K, M, G, T or P)");
        }
        power = unit->power;
    }

    // The value in MB is the number × 1024^power; it may be at most 2^53.
    if (decimal_exceeds_power_of_two(token.substr(0, digits_end), 53 - 10 * power)) {
        range_error(literal, "\"" + std::string(key) + "\" exceeds " + std::to_string(static_cast<long long>(kMaxValue)) +
                                 (is_size_key(key) ? " MB" : ""));
    }
    double value = 0;
    const char* first = token.data();
    auto [ptr, ec] = std::from_chars(first, first + digits_end, value, std::chars_format::fixed);
    if (ec == std::errc::result_out_of_range) range_error(literal, "\"" + component() + "\" is out of range");
    if (ec != std::errc() || ptr != first + digits_end) {
        syntax_error(literal, "\"" + component() + "\" is not a number");
    }
    value = std::ldexp(value, 10 * power);
    if (!std::isfinite(value) || value > kMaxValue) {
        range_error(literal, "\"" + std::string(key) + "\" exceeds " + std::to_string(static_cast<long long>(kMaxValue)) +
                                 (is_size_key(key) ? " MB" : ""));
    }
    return value;
}

// Shortest text that reads back as the same double, never in exponent notation.
std::size_t format_number(double value, char* out, std::size_t capacity) {
    auto [ptr, ec] = std::to_chars(out, out + capacity, value, std::chars_format::fixed);
    if (ec != std::errc()) throw Error(ErrorKind::internal, "tres value does not fit the output buffer");
    return static_cast<std::size_t>(ptr - out);
}

struct FormattedValue {
    char text[400];  // fixed notation of any double <= 2^53 fits (at most ~330 characters)
    std::size_t length;
};

FormattedValue format_component_value(std::string_view key, double value) {
    FormattedValue f{};
    if (!is_size_key(key)) {
        f.length = format_number(value, f.text, sizeof f.text - 1);
        return f;
    }
    const Unit* chosen = nullptr;
    double shown = value;
    for (const Unit& u : kUnits) {
        const double scaled = std::ldexp(value, -10 * u.power);
        // Exact only if no bit was lost: a tiny value scaled to P can underflow to 0, which is
        // whole but would print as "0P".
        if (scaled == std::floor(scaled) && std::ldexp(scaled, 10 * u.power) == value) {
            chosen = &u;
            shown = scaled;
            break;
        }
    }
    char letter = 'M';
    if (chosen != nullptr) letter = chosen->letter;
    f.length = format_number(shown, f.text, sizeof f.text - 2);
    f.text[f.length++] = letter;
    return f;
}

void check_value(std::string_view key, double value) {
    if (std::isnan(value) || std::isinf(value)) {
        throw Error(ErrorKind::out_of_range, "value of tres component \"" + std::string(key) + "\" is not finite");
    }
    if (value < 0) {
        throw Error(ErrorKind::out_of_range, "value of tres component \"" + std::string(key) + "\" is negative");
    }
    if (value > kMaxValue) {
        throw Error(ErrorKind::out_of_range, "value of tres component \"" + std::string(key) + "\" is too large");
    }
}

}  // namespace

bool is_size_key(std::string_view key) {
    return key == "mem" || key == "vmem" || starts_with(key, "fs/") || starts_with(key, "bb/");
}

bool valid_key(std::string_view key) {
    if (key.empty() || key.size() > kMaxKeyLength) return false;
    for (std::string_view plain : kPlainKeys) {
        if (key == plain) return true;
    }
    for (std::string_view family : kFamilies) {
        if (!starts_with(key, family)) continue;
        std::string_view name = key.substr(family.size());
        if (family == "gres/") {
            const std::size_t colon = name.find(':');
            if (colon != std::string_view::npos) {
                return valid_name(name.substr(0, colon)) && valid_name(name.substr(colon + 1));
            }
        }
        return valid_name(name);
    }
    return false;
}

double Vector::get(std::string_view key) const {
    for (std::size_t i = 0; i < count_; ++i) {
        if (items_[i].name() == key) return items_[i].value;
    }
    return 0;
}

void Vector::insert(std::string_view key, double value) {
    if (value == 0) return;
    Component* end = items_ + count_;
    Component* pos = std::lower_bound(items_, end, key,
                                      [](const Component& c, std::string_view k) { return c.name() < k; });
    if (pos != end && pos->name() == key) {
        throw Error(ErrorKind::invalid_text, "duplicate tres key \"" + std::string(key) + "\"");
    }
    if (count_ == kMaxComponents) {
        throw Error(ErrorKind::program_limit, "too many tres components",
                    "A tres value holds at most " + std::to_string(kMaxComponents) + " components.");
    }
    std::move_backward(pos, end, end + 1);
    pos->value = value;
    pos->key_length = static_cast<std::uint8_t>(key.size());
    std::memcpy(pos->key, key.data(), key.size());
    pos->key[key.size()] = '\0';
    ++count_;
}

std::size_t Vector::packed_size() const {
    std::size_t size = sizeof(std::uint16_t);
    for (std::size_t i = 0; i < count_; ++i) size += 1 + items_[i].key_length + sizeof(double);
    return size;
}

void Vector::pack(unsigned char* out) const {
    const auto count = static_cast<std::uint16_t>(count_);
    std::memcpy(out, &count, sizeof count);
    out += sizeof count;
    for (std::size_t i = 0; i < count_; ++i) {
        *out++ = items_[i].key_length;
        std::memcpy(out, items_[i].key, items_[i].key_length);
        out += items_[i].key_length;
        std::memcpy(out, &items_[i].value, sizeof(double));
        out += sizeof(double);
    }
}

std::size_t View::checked_count(const unsigned char* data, std::size_t size) {
    std::uint16_t count = 0;
    if (size < sizeof count) throw Error(ErrorKind::internal, "corrupt tres value: too short");
    std::memcpy(&count, data, sizeof count);
    // Walk once so that cursors never read past the end.
    std::size_t remaining = size - sizeof count;
    const unsigned char* p = data + sizeof count;
    for (std::size_t i = 0; i < count; ++i) {
        if (remaining < 1 || remaining < 1u + p[0] + sizeof(double)) {
            throw Error(ErrorKind::internal, "corrupt tres value: truncated component");
        }
        // Operations copy keys into a Vector's Component::key.
        if (p[0] > kMaxKeyLength) throw Error(ErrorKind::internal, "corrupt tres value: key too long");
        const std::size_t step = 1u + p[0] + sizeof(double);
        p += step;
        remaining -= step;
    }
    if (count > kMaxComponents || remaining != 0) {
        throw Error(ErrorKind::internal, "corrupt tres value: bad length");
    }
    return count;
}

bool View::Cursor::next() {
    if (remaining_ == 0) return false;
    const std::size_t key_length = pos_[0];
    key_ = std::string_view(reinterpret_cast<const char*>(pos_ + 1), key_length);
    value_ = read_double(pos_ + 1 + key_length);
    pos_ += 1 + key_length + sizeof(double);
    --remaining_;
    return true;
}

double View::get(std::string_view key) const {
    Cursor c = cursor();
    while (c.next()) {
        if (c.key() == key) return c.value();
        if (c.key() > key) break;
    }
    return 0;
}

void parse(std::string_view text, Vector& out) {
    out.clear();
    std::string_view rest = text;
    while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.front()))) rest.remove_prefix(1);
    while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.back()))) rest.remove_suffix(1);
    if (rest.empty()) return;  // the empty vector

    std::string_view seen[kMaxComponents];  // keys read so far, zero values included
    std::size_t seen_count = 0;
    std::size_t position = 0;
    while (true) {
        ++position;
        const std::size_t comma = rest.find(',');
        const std::string_view component = rest.substr(0, comma);
        if (component.empty()) syntax_error(text, "empty component at position " + std::to_string(position));
        const std::size_t equals = component.find('=');
        if (equals == std::string_view::npos) {
            syntax_error(text, "component \"" + excerpt(component) + "\" has no \"=\"");
        }
        const std::string_view key = component.substr(0, equals);
        if (key.empty()) syntax_error(text, "empty key in component \"" + excerpt(component) + "\"");
        if (key.size() > kMaxKeyLength) {
            throw Error(ErrorKind::program_limit, "tres key too long",
                        "Keys are at most " + std::to_string(kMaxKeyLength) + " bytes.");
        }
        if (!valid_key(key)) {
            syntax_error(text, "unknown key \"" + std::string(key) +
                                   "\" (expected billing, cpu, energy, mem, node, pages, vmem, "
                                   "gres/NAME[:TYPE], license/NAME, fs/NAME, bb/NAME or ic/NAME)");
        }
        const double value = parse_value(text, key, component.substr(equals + 1));
        if (std::find(seen, seen + seen_count, key) != seen + seen_count) {
            syntax_error(text, "duplicate key \"" + std::string(key) + "\"");
        }
        if (seen_count == kMaxComponents) {
            throw Error(ErrorKind::program_limit, "too many tres components",
                        "A tres value holds at most " + std::to_string(kMaxComponents) + " components.");
        }
        seen[seen_count++] = key;
        out.insert(key, value);
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
        if (rest.empty()) syntax_error(text, "empty component at position " + std::to_string(position + 1));
    }
}

void insert_checked(Vector& out, std::string_view key, double value) {
    if (!valid_key(key)) throw Error(ErrorKind::invalid_text, "invalid tres key \"" + std::string(key) + "\"");
    check_value(key, value);
    out.insert(key, value);
}

std::size_t format_length(const View& v) {
    std::size_t length = 0;
    View::Cursor c = v.cursor();
    while (c.next()) {
        if (length > 0) ++length;  // comma
        length += c.key().size() + 1 + format_component_value(c.key(), c.value()).length;
    }
    return length;
}

void format(const View& v, char* out, std::size_t capacity) {
    std::size_t used = 0;
    auto append = [&](const char* s, std::size_t n) {
        if (used + n >= capacity) throw Error(ErrorKind::internal, "tres output buffer too small");
        std::memcpy(out + used, s, n);
        used += n;
    };
    View::Cursor c = v.cursor();
    while (c.next()) {
        if (used > 0) append(",", 1);
        append(c.key().data(), c.key().size());
        append("=", 1);
        const FormattedValue f = format_component_value(c.key(), c.value());
        append(f.text, f.length);
    }
    out[used] = '\0';
}

void add(const View& a, const View& b, Vector& out) {
    out = Vector();
    View::Cursor ca = a.cursor(), cb = b.cursor();
    bool more_a = ca.next(), more_b = cb.next();
    while (more_a || more_b) {
        if (more_b && (!more_a || cb.key() < ca.key())) {
            out.insert(cb.key(), cb.value());
            more_b = cb.next();
        } else if (more_a && (!more_b || ca.key() < cb.key())) {
            out.insert(ca.key(), ca.value());
            more_a = ca.next();
        } else {
            const double sum = ca.value() + cb.value();
            if (sum > kMaxValue) {
                throw Error(ErrorKind::out_of_range, "tres sum out of range",
                            "The sum of \"" + std::string(ca.key()) + "\" exceeds the largest tres value.");
            }
            out.insert(ca.key(), sum);
            more_a = ca.next();
            more_b = cb.next();
        }
    }
}

void scale(const View& a, double factor, Vector& out) {
    if (!std::isfinite(factor) || factor < 0) {
        throw Error(ErrorKind::out_of_range, "a tres value can only be multiplied by a finite, non-negative number");
    }
    out = Vector();
    View::Cursor c = a.cursor();
    while (c.next()) {
        const double product = c.value() * factor;
        if (product > kMaxValue) {
            throw Error(ErrorKind::out_of_range, "tres product out of range",
                        "\"" + std::string(c.key()) + "\" would exceed the largest tres value.");
        }
        out.insert(c.key(), product);
    }
}

int compare(const View& a, const View& b) {
    View::Cursor ca = a.cursor(), cb = b.cursor();
    while (true) {
        const bool more_a = ca.next(), more_b = cb.next();
        if (!more_a || !more_b) return more_a ? 1 : (more_b ? -1 : 0);
        if (int k = ca.key().compare(cb.key()); k != 0) return k < 0 ? -1 : 1;
        if (ca.value() != cb.value()) return ca.value() < cb.value() ? -1 : 1;
    }
}

}  // namespace hpcacct::tres
