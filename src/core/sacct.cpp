#include "core/sacct.hpp"

#include "core/calendar.hpp"
#include "core/error.hpp"

#include <cctype>
#include <cstdio>

namespace hpcacct::sacct {
namespace {

std::string lower(std::string_view text) {
    std::string out(text);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

std::string trim(std::string_view text) {
    std::size_t b = 0, e = text.size();
    while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
    return std::string(text.substr(b, e - b));
}

void append_null(std::string& out) { out += "\\N"; }

// The digits text[at, at + count) as a number, or -1 if one is not a digit.
int digits(std::string_view text, std::size_t at, std::size_t count) noexcept {
    int value = 0;
    for (std::size_t i = at; i < at + count; ++i) {
        if (text[i] < '0' || text[i] > '9') return -1;
        value = value * 10 + (text[i] - '0');
    }
    return value;
}

// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (year >= 1).
long long days_since_epoch(int year, int month, int day) noexcept {
    const int y = month <= 2 ? year - 1 : year;
    const int era = y / 400;  // y >= 0 here
    const int year_of_era = y - era * 400;
    const int day_of_year = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1;
    const int day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    return static_cast<long long>(era) * 146097 + day_of_era - 719468;
}

}  // namespace

Time parse_time(std::string_view text) noexcept {
    constexpr Time kNone{Time::Kind::none, 0};
    if (!text.empty() && text.size() <= 11) {  // epoch seconds (11 digits: < 2^37, no overflow)
        long long seconds = 0;
        std::size_t i = 0;
        for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) seconds = seconds * 10 + (text[i] - '0');
        if (i == text.size()) return {Time::Kind::instant, seconds};
    }
    // YYYY-MM-DD?hh:mm:ss, 19 characters, then the offset if any
    if (text.size() < 19 || text[4] != '-' || text[7] != '-' || (text[10] != 'T' && text[10] != ' ') ||
        text[13] != ':' || text[16] != ':') {
        return kNone;
    }
    const int year = digits(text, 0, 4), month = digits(text, 5, 2), day = digits(text, 8, 2);
    const int hour = digits(text, 11, 2), minute = digits(text, 14, 2), second = digits(text, 17, 2);
    if (year < 1 || month < 1 || month > 12 || day < 1 || hour < 0 || hour > 23 || minute < 0 || minute > 59 ||
        second < 0 || second > 59 || day > calendar::days_in_month(year, month)) {
        return kNone;
    }
    const long long wall = days_since_epoch(year, month, day) * 86400 + hour * 3600 + minute * 60 + second;
    const std::string_view zone = text.substr(19);
    if (zone.empty()) return {Time::Kind::local, wall};
    if (zone == "Z") return {Time::Kind::instant, wall};
    if (zone[0] != '+' && zone[0] != '-') return kNone;
    int offset_minutes;
    if (zone.size() == 3) {  // +hh
        const int hours = digits(zone, 1, 2);
        offset_minutes = hours < 0 || hours > 15 ? -1 : hours * 60;
    } else if (zone.size() == 5 || (zone.size() == 6 && zone[3] == ':')) {  // +hhmm, +hh:mm
        const int hours = digits(zone, 1, 2), minutes = digits(zone, zone.size() - 2, 2);
        offset_minutes = hours < 0 || hours > 15 || minutes < 0 || minutes > 59 ? -1 : hours * 60 + minutes;
    } else {
        return kNone;
    }
    if (offset_minutes < 0) return kNone;
    const long long offset = offset_minutes * 60LL;
    return {Time::Kind::instant, zone[0] == '+' ? wall - offset : wall + offset};
}

std::string staging_columns() {
    std::string out = "lineno, line, problem";
    for (std::string_view f : kFields) {
        out += ", ";
        if (f == "user" || f == "end") {
            out += '"';
            out += f;
            out += '"';
        } else {
            out += f;
        }
    }
    return out;
}

std::string_view chomp(std::string_view line) {
    if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return line;
}

std::size_t field_count(std::string_view line, std::string_view delimiter) {
    if (delimiter.empty()) delimiter = "|";
    std::size_t n = 1;
    for (std::size_t at = line.find(delimiter); at != std::string_view::npos;
         at = line.find(delimiter, at + delimiter.size())) {
        ++n;
    }
    return n;
}

void RecordJoiner::add(std::string_view line, long long lineno, std::vector<Record>& ready) {
    const std::size_t fields = field_count(line, delimiter_);
    if (open_) {
        const std::size_t joined = pending_fields_ + fields - 1;
        if (joined <= width_) {
            pending_ += '\n';
            pending_ += line;
            pending_fields_ = joined;
            if (joined == width_) {
                ready.push_back({std::move(pending_), pending_lineno_});
                pending_.clear();
                open_ = false;
            }
            return;
        }
        ready.push_back({std::move(pending_), pending_lineno_});  // too short: reported as it is
        pending_.clear();
        open_ = false;
    }
    if (fields >= width_) {
        ready.push_back({std::string(line), lineno});
        return;
    }
    pending_ = std::string(line);
    pending_lineno_ = lineno;
    pending_fields_ = fields;
    open_ = true;
}

void RecordJoiner::finish(std::vector<Record>& ready) {
    if (!open_) return;
    ready.push_back({std::move(pending_), pending_lineno_});
    pending_.clear();
    open_ = false;
}

std::vector<std::string_view> split(std::string_view line, std::string_view delimiter) {
    std::vector<std::string_view> fields;
    if (delimiter.empty()) delimiter = "|";
    std::size_t from = 0;
    for (;;) {
        const std::size_t bar = line.find(delimiter, from);
        if (bar == std::string_view::npos) {
            fields.push_back(line.substr(from));
            return fields;
        }
        fields.push_back(line.substr(from, bar - from));
        from = bar + delimiter.size();
    }
}

Header Header::parse(std::string_view line, std::string_view delimiter) {
    Header h;
    h.positions_.fill(-1);
    const std::vector<std::string_view> names = split(chomp(line), delimiter);
    h.width_ = names.size();
    for (std::size_t i = 0; i < names.size(); ++i) {
        const std::string name = lower(trim(names[i]));
        for (std::size_t f = 0; f < kFieldCount; ++f) {
            if (name != kFields[f]) continue;
            if (h.positions_[f] >= 0) {
                throw Error(ErrorKind::invalid_argument, "sacct header names field \"" + std::string(kFields[f]) + "\" twice");
            }
            h.positions_[f] = static_cast<int>(i);
        }
    }
    std::string missing;
    for (std::string_view r : kRequired) {
        for (std::size_t f = 0; f < kFieldCount; ++f) {
            if (kFields[f] == r && h.positions_[f] < 0) {
                if (!missing.empty()) missing += ", ";
                missing += r;
            }
        }
    }
    if (!missing.empty()) {
        throw Error(ErrorKind::invalid_argument,
                    "the first line is not a sacct header with the fields the loader needs (missing: " + missing + ")",
                    "Run sacct with --parsable2 and without --noheader, and -o Cluster,JobID,Account,User,Partition,"
                    "Submit,Start,End,AllocTRES,State.");
    }
    return h;
}

void append_copy_text(std::string& out, std::string_view text) {
    for (char c : text) {
        switch (c) {
            case '\\': out += "\\\\"; break;
            case '\t': out += "\\t"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            default: out += c;
        }
    }
}

bool valid_utf8(std::string_view text) {
    std::size_t i = 0;
    while (i < text.size()) {
        const unsigned char c = static_cast<unsigned char>(text[i]);
        std::size_t n;
        unsigned int cp;
        if (c == 0) return false;  // valid UTF-8, but no text
        if (c < 0x80) {
            ++i;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            n = 1;
            cp = c & 0x1Fu;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            cp = c & 0x0Fu;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            cp = c & 0x07u;
        } else {
            return false;
        }
        for (std::size_t k = 1; k <= n; ++k) {
            if (i + k >= text.size()) return false;
            const unsigned char d = static_cast<unsigned char>(text[i + k]);
            if ((d & 0xC0u) != 0x80u) return false;
            cp = (cp << 6) | (d & 0x3Fu);
        }
        // overlong forms, surrogates, beyond U+10FFFF
        if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            return false;
        }
        i += n + 1;
    }
    return true;
}

bool copy_row(const Header& header, std::string_view line, long long lineno, std::string& out,
              std::string_view delimiter) {
    line = chomp(line);
    const bool utf8 = valid_utf8(line);
    const std::vector<std::string_view> fields = split(line, delimiter);
    std::string shown_line;  // the line as --parsable2 prints it, '|' between the fields
    if (!delimiter.empty() && delimiter != "|") {
        for (std::size_t i = 0; i < fields.size(); ++i) {
            if (i > 0) shown_line += '|';
            shown_line += fields[i];
        }
        line = shown_line;
    }
    const bool fits = utf8 && fields.size() == header.width();
    out += std::to_string(lineno);
    out += '\t';
    if (utf8) {
        append_copy_text(out, line);
    } else {
        std::string shown;
        for (char c : line) shown += (c != '\0' && static_cast<unsigned char>(c) < 0x80) ? c : '?';
        append_copy_text(out, shown);
    }
    out += '\t';
    if (fits) {
        append_null(out);
    } else if (!utf8) {
        char problem[160];
        std::snprintf(problem, sizeof problem,
                      line.find('\0') != std::string_view::npos
                          ? "line %lld holds a NUL byte (shown as ?, as any non-ASCII byte)"
                          : "line %lld is not valid UTF-8 (its non-ASCII bytes are shown as ?)",
                      lineno);
        append_copy_text(out, problem);
    } else {
        char problem[160];
        std::snprintf(problem, sizeof problem, "line %lld has %zu fields, the header %zu", lineno, fields.size(),
                      header.width());
        append_copy_text(out, problem);
    }
    for (std::size_t f = 0; f < kFieldCount; ++f) {
        out += '\t';
        const int at = header.position(f);
        if (!fits || at < 0) {
            append_null(out);
        } else {
            append_copy_text(out, fields[static_cast<std::size_t>(at)]);
        }
    }
    out += '\n';
    return fits;
}

namespace {

std::string time_argument_text(const std::tm& time) {
    char buffer[32];
    std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%S", &time);
    return buffer;
}

}  // namespace

std::string local_time_argument(std::time_t instant) {
    std::tm local{};
    if (localtime_r(&instant, &local) == nullptr) {
        throw Error(ErrorKind::invalid_datetime, "cannot convert the time to local time");
    }
    return time_argument_text(local);
}

std::string utc_time_argument(std::time_t instant) {
    std::tm utc{};
    if (gmtime_r(&instant, &utc) == nullptr) throw Error(ErrorKind::invalid_datetime, "cannot convert the time to UTC");
    return time_argument_text(utc);
}

std::vector<std::string> sacct_arguments(const std::string& cluster, const std::string& start,
                                         const std::string& end) {
    return {
        "--parsable2",         // '|' between fields, none after the last; a header line
        "--allusers",          // every user's jobs, not only the caller's
        "--allocations",       // the allocation line of each job, not its steps
        "--duplicates",        // every run of a requeued job (same JobID, another Submit)
        "--delimiter=" + std::string(kDelimiter),  // not '|': an account name may contain it
        "--clusters=" + cluster,
        "--starttime=" + start,  // jobs eligible or running in [start, end]: both ends included
        "--endtime=" + end,
        // parsable output is never cut; the widths are there for anyone who drops --parsable2
        "--format=Cluster%64,JobID%64,JobIDRaw%32,Account%64,User%64,Partition%64,Submit%32,Start%32,"
        "End%32,ElapsedRaw%20,AllocTRES%1000,ReqTRES%1000,State%64,QOS%64,NodeList%1000",
    };
}

AssocHeader AssocHeader::parse(std::string_view line) {
    AssocHeader h;
    const std::vector<std::string_view> names = split(chomp(line));
    h.width = names.size();
    for (std::size_t i = 0; i < names.size(); ++i) {
        const std::string name = lower(trim(names[i]));
        if (name == "cluster") h.cluster = static_cast<int>(i);
        if (name == "account") h.account = static_cast<int>(i);
        if (name == "user") h.user = static_cast<int>(i);
    }
    if (h.account < 0 || h.user < 0) {
        throw Error(ErrorKind::invalid_argument,
                    "the first line is not a sacctmgr association header with Account and User",
                    "Run sacctmgr --parsable2 show associations format=Cluster,Account,User (without --noheader).");
    }
    return h;
}

bool assoc_copy_row(const AssocHeader& header, std::string_view line, std::string& out) {
    if (!valid_utf8(chomp(line))) return false;
    const std::vector<std::string_view> fields = split(chomp(line));
    if (fields.size() < header.width) return false;
    const std::size_t extra = fields.size() - header.width;  // the account's '|'
    const auto account = static_cast<std::size_t>(header.account);
    const int at[3] = {header.cluster, header.account, header.user};
    for (int i = 0; i < 3; ++i) {
        if (i > 0) out += '\t';
        if (at[i] < 0) {
            append_null(out);
        } else if (static_cast<std::size_t>(at[i]) == account) {
            for (std::size_t k = 0; k <= extra; ++k) {
                if (k > 0) out += '|';
                append_copy_text(out, fields[account + k]);
            }
        } else {
            const auto f = static_cast<std::size_t>(at[i]);
            append_copy_text(out, fields[f < account ? f : f + extra]);
        }
    }
    out += '\n';
    return true;
}

std::vector<std::string> sacctmgr_arguments() {
    return {"--parsable2", "--readonly", "show", "associations", "format=Cluster,Account,User"};
}

std::vector<std::string> sacctmgr_cluster_arguments(const std::string& cluster) {
    return {"--noheader", "--parsable2", "--readonly", "show", "cluster", "where", "name=" + cluster, "format=Cluster"};
}

}  // namespace hpcacct::sacct
