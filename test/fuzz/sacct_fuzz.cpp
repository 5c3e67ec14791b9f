// sacct text as hpcacct-sacct reads it (sacct::Header::parse, sacct::copy_row).
//
// Properties, for every input (its first line the header, the rest lines):
//  - Header::parse either succeeds or throws hpcacct::Error of kind invalid_argument;
//  - a parsed header names every required field, at distinct positions inside the line;
//  - every line becomes exactly one COPY row: 3 + kFieldCount tab-separated columns ending in
//    one newline, with no raw tab, newline or carriage return inside a column, valid UTF-8
//    whatever the input; a line with the wrong number of fields or invalid UTF-8 is reported
//    (false) and all its fields are NULL.
#include "fuzz_support.hpp"

#include "core/sacct.hpp"

#include <algorithm>
#include <cstdint>

namespace sacct = hpcacct::sacct;
using hpcacct::Error;
using hpcacct::ErrorKind;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const std::size_t end_of_header = std::min(text.find('\n'), text.size());
    sacct::Header header;
    try {
        header = sacct::Header::parse(text.substr(0, end_of_header));
    } catch (const Error& e) {
        FUZZ_CHECK(e.kind() == ErrorKind::invalid_argument, "unexpected error kind %d (%s)", static_cast<int>(e.kind()),
                   e.what());
        return 0;
    }
    for (std::string_view r : sacct::kRequired) {
        for (std::size_t f = 0; f < sacct::kFieldCount; ++f) {
            if (sacct::kFields[f] != r) continue;
            FUZZ_CHECK(header.position(f) >= 0 && static_cast<std::size_t>(header.position(f)) < header.width(),
                       "required field %zu at %d of %zu", f, header.position(f), header.width());
        }
    }
    std::size_t from = end_of_header + 1;
    long long lineno = 1;
    while (from < text.size()) {
        const std::size_t nl = std::min(text.find('\n', from), text.size());
        const std::string_view line = text.substr(from, nl - from);
        from = nl + 1;
        std::string out;
        const bool fits = sacct::copy_row(header, line, ++lineno, out);
        FUZZ_CHECK(!out.empty() && out.back() == '\n', "row does not end in a newline");
        const std::string_view body(out.data(), out.size() - 1);
        FUZZ_CHECK(body.find('\n') == std::string_view::npos && body.find('\r') == std::string_view::npos,
                   "raw newline inside a row");
        const std::size_t columns = static_cast<std::size_t>(std::count(body.begin(), body.end(), '\t')) + 1;
        FUZZ_CHECK(columns == 3 + sacct::kFieldCount, "%zu columns", columns);
        FUZZ_CHECK(fits == (sacct::valid_utf8(sacct::chomp(line)) &&
                            sacct::split(sacct::chomp(line)).size() == header.width()),
                   "fit misreported");
        FUZZ_CHECK(sacct::valid_utf8(body), "a row that is not UTF-8 would fail the whole COPY");
        if (!fits) {
            std::string nulls;
            for (std::size_t f = 0; f < sacct::kFieldCount; ++f) nulls += "\t\\N";
            FUZZ_CHECK(body.size() >= nulls.size() && body.substr(body.size() - nulls.size()) == nulls,
                       "a line that does not fit must have NULL fields");
        }
    }
    // the same lines split on run's delimiter: rows as well formed, the line shown with '|'
    sacct::Header other;
    try {
        other = sacct::Header::parse(text.substr(0, end_of_header), sacct::kDelimiter);
    } catch (const Error&) {
        return 0;
    }
    from = end_of_header + 1;
    while (from < text.size()) {
        const std::size_t nl = std::min(text.find('\n', from), text.size());
        const std::string_view line = text.substr(from, nl - from);
        from = nl + 1;
        std::string out;
        const bool fits = sacct::copy_row(other, line, ++lineno, out, sacct::kDelimiter);
        FUZZ_CHECK(!out.empty() && out.back() == '\n', "row does not end in a newline (delimiter)");
        const std::string_view body(out.data(), out.size() - 1);
        FUZZ_CHECK(body.find('\n') == std::string_view::npos && body.find('\r') == std::string_view::npos,
                   "raw newline inside a row (delimiter)");
        const std::size_t columns = static_cast<std::size_t>(std::count(body.begin(), body.end(), '\t')) + 1;
        FUZZ_CHECK(columns == 3 + sacct::kFieldCount, "%zu columns (delimiter)", columns);
        FUZZ_CHECK(fits == (sacct::valid_utf8(sacct::chomp(line)) &&
                            sacct::split(sacct::chomp(line), sacct::kDelimiter).size() == other.width()),
                   "fit misreported (delimiter)");
        FUZZ_CHECK(sacct::valid_utf8(body), "a row that is not UTF-8 would fail the whole COPY (delimiter)");
        FUZZ_CHECK(body.find(sacct::kDelimiter) == std::string_view::npos, "the delimiter left in the row");
    }
    return 0;
}
