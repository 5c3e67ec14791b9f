// sacct's text, as the loader (hpcacct-sacct) reads it: a header line names the fields, each
// following line is split on '|' and its fields are put in the order of the staging table's
// columns (hpcacct.sacct_staging), as one line of COPY text. Also the sacct command line of
// `hpcacct-sacct run` and sacctmgr's associations. No PostgreSQL and no libpq here.
#pragma once
#include "core/core_only.hpp"

#include <array>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

namespace hpcacct::sacct {

// The staging table's field columns, in order, and sacct's name of each (case-insensitive).
inline constexpr std::size_t kFieldCount = 15;
inline constexpr std::array<std::string_view, kFieldCount> kFields = {
    "cluster", "jobid", "jobidraw", "account", "user", "partition", "submit", "start",
    "end", "alloctres", "state", "elapsedraw", "reqtres", "qos", "nodelist"};
// Fields without which a line cannot be charged: the header must name them.
inline constexpr std::array<std::string_view, 10> kRequired = {
    "cluster", "jobid", "account", "user", "partition", "submit", "start", "end", "alloctres", "state"};
// The COPY column list matching copy_row(): lineno, line, problem, then kFields.
std::string staging_columns();

// Where each staging field is in a sacct line (-1: not printed).
class Header {
public:
    // Throws Error(invalid_argument) when a required field is missing or a field is named
    // twice. Unknown fields are ignored; an empty name (the trailing '|' of --parsable) too.
    static Header parse(std::string_view line, std::string_view delimiter = "|");

    std::size_t width() const { return width_; }  // fields per line
    int position(std::size_t field) const { return positions_[field]; }

private:
    std::array<int, kFieldCount> positions_{};
    std::size_t width_ = 0;
};

// Splits on '|' or another delimiter (sacct --parsable2 does not escape it; sacctmgr lets an
// account name contain '|', so `run` asks sacct for kDelimiter instead).
std::vector<std::string_view> split(std::string_view line, std::string_view delimiter = "|");
// sacct's --delimiter for `run`: ASCII unit separator, which no name contains in practice.
inline constexpr std::string_view kDelimiter = "\x1f";

// Removes a trailing '\r' (a file written on another system).
std::string_view chomp(std::string_view line);

// The number of fields of a line split on `delimiter`.
std::size_t field_count(std::string_view line, std::string_view delimiter = "|");

// Puts back together a record that spans lines: sacct and sacctmgr print a line break inside
// a name (an account, a job name) as it is. A line with fewer fields than the header is
// joined, with '\n', to the lines after it while they complete it to exactly the header's
// width; a line that would overshoot ends the record (which then has the wrong width and is
// reported as such) and starts the next one.
class RecordJoiner {
public:
    struct Record {
        std::string text;
        long long lineno;  // of its first line
    };
    RecordJoiner(std::size_t width, std::string_view delimiter) : width_(width), delimiter_(delimiter) {}
    // Takes the next line (without its line break); appends the records it completes.
    void add(std::string_view line, long long lineno, std::vector<Record>& ready);
    // The record still open at the end of the input, if any.
    void finish(std::vector<Record>& ready);
    bool open() const { return open_; }

private:
    std::size_t width_;
    std::string delimiter_;
    bool open_ = false;
    std::string pending_;
    long long pending_lineno_ = 0;
    std::size_t pending_fields_ = 0;
};

// Appends `text` to `out` escaped for COPY's text format.
void append_copy_text(std::string& out, std::string_view text);

// Whether the text is valid UTF-8 without a NUL byte, which no PostgreSQL text holds (the
// loader sends UTF-8: one bad byte, or a NUL, would fail the COPY).
bool valid_utf8(std::string_view text);

// Appends one COPY text row for a sacct line: lineno, the line, a problem (NULL unless the
// line has the wrong number of fields or is not valid UTF-8 — then every field is NULL, and
// the invalid bytes of the line are shown as '?'), the fields. Fields are split on
// `delimiter`; the line is kept with '|' in its place. Returns false when the line had a problem.
bool copy_row(const Header& header, std::string_view line, long long lineno, std::string& out,
              std::string_view delimiter = "|");

// A time as sacct prints it, read as hpcacct.sacct_time() documents: up to 11 digits are
// seconds since the epoch; YYYY-MM-DD[T ]hh:mm:ss (a real date, year 0001-9999) followed by
// Z, +hh, +hhmm or +hh:mm (hh up to 15) is an instant; without the offset it is a local time,
// which the caller reads in the site's time zone. Anything else (Unknown, None, '', a bad
// date, spaces) is not a time.
struct Time {
    enum class Kind { none, instant, local };
    Kind kind;
    // instant: seconds since 1970-01-01 00:00 UTC; local: the wall clock's seconds since
    // 1970-01-01 00:00 (no zone applied)
    long long seconds;
};
Time parse_time(std::string_view text) noexcept;

// sacct's -S/-E argument for an instant, in the local time of the machine (sacct reads it so).
std::string local_time_argument(std::time_t instant);
// The same in UTC, for a sacct run with TZ=UTC0 (kUtcZone): local text in the hour a DST
// change repeats is ambiguous, and sacct (mktime) reads it as the later hour.
std::string utc_time_argument(std::time_t instant);
inline constexpr const char* kUtcZone = "UTC0";

// The arguments (argv[1..]) of the sacct call of `run`: all users, allocations only, every
// run of a requeued job, one cluster, the window [start, end] (both local time text).
std::vector<std::string> sacct_arguments(const std::string& cluster, const std::string& start,
                                         const std::string& end);
// SLURM_TIME_FORMAT for sacct: seconds since the epoch, the one format that names an
// instant (Slurm 22.05 drops %z from the format, so %FT%T%z prints local time without offset).
inline constexpr const char* kTimeFormat = "%s";

// sacctmgr associations: where Cluster, Account and User are in the header.
class AssocHeader {
public:
    static AssocHeader parse(std::string_view line);  // Error(invalid_argument) without Account
    int cluster = -1, account = -1, user = -1;
    std::size_t width = 0;
};
// One COPY row (cluster, account, user) of an association line; false if it has too few
// fields or is not UTF-8 text (nothing appended: it would fail the whole COPY). sacctmgr lets
// an account name hold '|' and has no other delimiter: a line with more fields than the header
// gives the extra ones to the account (Unix user names and cluster names hold no '|').
bool assoc_copy_row(const AssocHeader& header, std::string_view line, std::string& out);
std::vector<std::string> sacctmgr_arguments();
// sacctmgr's list of the clusters named `cluster` (one line with its name if slurmdbd knows it).
std::vector<std::string> sacctmgr_cluster_arguments(const std::string& cluster);

}  // namespace hpcacct::sacct
