#include "core/error.hpp"
#include "core/sacct.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace sacct = hpcacct::sacct;

namespace {

const char kHeader[] = "Cluster|JobID|Account|User|Partition|Submit|Start|End|AllocTRES|State";

std::string row(const char* header, const char* line, long long lineno = 2) {
    std::string out;
    sacct::copy_row(sacct::Header::parse(header), line, lineno, out);
    return out;
}

}  // namespace

TEST(SacctHeader, FindsFieldsByNameInAnyOrderAndCase) {
    const sacct::Header h = sacct::Header::parse("state|ALLOCTRES|end|start|submit|partition|user|account|jobid|cluster|QOS");
    EXPECT_EQ(h.width(), 11u);
    EXPECT_EQ(h.position(0), 9);   // cluster
    EXPECT_EQ(h.position(1), 8);   // jobid
    EXPECT_EQ(h.position(2), -1);  // jobidraw not printed
    EXPECT_EQ(h.position(13), 10); // qos
}

TEST(SacctHeader, RefusesAMissingRequiredFieldNamingIt) {
    try {
        sacct::Header::parse("Cluster|JobID|Account|User|Partition|Submit|Start|End|State");
        FAIL() << "no exception";
    } catch (const hpcacct::Error& e) {
        EXPECT_EQ(e.kind(), hpcacct::ErrorKind::invalid_argument);
        EXPECT_NE(std::string(e.what()).find("alloctres"), std::string::npos) << e.what();
    }
}

TEST(SacctHeader, RefusesADataLineAsHeader) {
    EXPECT_THROW(sacct::Header::parse("c|1|p1|u|cpu|2024-01-01T00:00:00|2024-01-01T00:00:00|2024-01-01T01:00:00|cpu=1|COMPLETED"),
                 hpcacct::Error);
}

TEST(SacctHeader, RefusesAFieldNamedTwice) {
    EXPECT_THROW(sacct::Header::parse(std::string(kHeader) + "|JobID"), hpcacct::Error);
}

TEST(SacctHeader, IgnoresTheTrailingBarOfParsable) {
    const sacct::Header h = sacct::Header::parse(std::string(kHeader) + "|\n");
    EXPECT_EQ(h.width(), 11u);
    EXPECT_EQ(row((std::string(kHeader) + "|").c_str(), "c|1|p|u|q|S|T|E|cpu=1|COMPLETED|"),
              "2\tc|1|p|u|q|S|T|E|cpu=1|COMPLETED|\t\\N\tc\t1\t\\N\tp\tu\tq\tS\tT\tE\tcpu=1\tCOMPLETED\t\\N\t\\N\t\\N\t\\N\n");
}

TEST(SacctRow, PutsFieldsInStagingOrderWithNullsForAbsentOnes) {
    EXPECT_EQ(row(kHeader, "hlrn|3.batch|p1||cpu|2024-01-01T00:00:00|2024-01-01T00:00:00|Unknown|cpu=4,mem=16G|RUNNING\r\n", 7),
              "7\thlrn|3.batch|p1||cpu|2024-01-01T00:00:00|2024-01-01T00:00:00|Unknown|cpu=4,mem=16G|RUNNING\t\\N\t"
              "hlrn\t3.batch\t\\N\tp1\t\tcpu\t2024-01-01T00:00:00\t2024-01-01T00:00:00\tUnknown\tcpu=4,mem=16G\tRUNNING"
              "\t\\N\t\\N\t\\N\t\\N\n");
}

TEST(SacctRow, AWrongFieldCountIsAProblemWithTheLineKept) {
    std::string out;
    EXPECT_FALSE(sacct::copy_row(sacct::Header::parse(kHeader), "c|1|p", 5, out));
    EXPECT_EQ(out, "5\tc|1|p\tline 5 has 3 fields, the header 10"
                   "\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\n");
}

TEST(SacctRow, EscapesCopySpecialCharacters) {
    std::string out;
    sacct::append_copy_text(out, "a\\b\tc\nd\re");
    EXPECT_EQ(out, "a\\\\b\\tc\\nd\\re");
}

TEST(SacctRow, StagingColumnsMatchTheRowOrder) {
    EXPECT_EQ(sacct::staging_columns(),
              "lineno, line, problem, cluster, jobid, jobidraw, account, \"user\", partition, submit, start, \"end\", "
              "alloctres, state, elapsedraw, reqtres, qos, nodelist");
}

TEST(SacctSplit, KeepsEmptyFields) {
    const auto f = sacct::split("a||b|");
    ASSERT_EQ(f.size(), 4u);
    EXPECT_EQ(f[1], "");
    EXPECT_EQ(f[3], "");
}

TEST(SacctRun, AsksForEveryUserEveryRunAllocationsOnlyOneClusterAndTheWindow) {
    const auto a = sacct::sacct_arguments("hlrn", "2024-01-01T00:00:00", "2024-01-01T01:00:00");
    auto has = [&](const std::string& x) {
        for (const auto& s : a) if (s == x) return true;
        return false;
    };
    EXPECT_TRUE(has("--parsable2"));
    EXPECT_TRUE(has("--allusers"));
    EXPECT_TRUE(has("--allocations"));
    EXPECT_TRUE(has("--duplicates"));
    EXPECT_TRUE(has("--delimiter=" + std::string(sacct::kDelimiter)));
    EXPECT_TRUE(has("--clusters=hlrn"));
    EXPECT_TRUE(has("--starttime=2024-01-01T00:00:00"));
    EXPECT_TRUE(has("--endtime=2024-01-01T01:00:00"));
    for (const auto& s : a) EXPECT_EQ(s.find("noheader"), std::string::npos);
    // every required field is in the format, so the header it prints is accepted
    std::string format;
    for (const auto& s : a) if (s.rfind("--format=", 0) == 0) format = s.substr(9);
    std::string header;
    std::size_t from = 0;
    while (from <= format.size()) {
        const std::size_t comma = format.find(',', from);
        std::string item = format.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
        item = item.substr(0, item.find('%'));
        header += (header.empty() ? "" : "|") + item;
        if (comma == std::string::npos) break;
        from = comma + 1;
    }
    const sacct::Header h = sacct::Header::parse(header);
    for (std::size_t f = 0; f < sacct::kFieldCount; ++f) EXPECT_GE(h.position(f), 0) << sacct::kFields[f];
}

TEST(SacctRun, LocalTimeArgumentIsIsoWithoutOffset) {
    const std::string t = sacct::local_time_argument(0);
    ASSERT_EQ(t.size(), 19u);
    EXPECT_EQ(t[10], 'T');
}

TEST(SacctRow, AnotherDelimiterLetsANameContainABar) {
    const std::string d(sacct::kDelimiter);
    const std::string header = "Cluster" + d + "JobID" + d + "Account" + d + "User" + d + "Partition" + d + "Submit" +
                               d + "Start" + d + "End" + d + "AllocTRES" + d + "State";
    const std::string line = "c" + d + "7" + d + "p|q" + d + "u" + d + "cpu" + d + "1" + d + "2" + d + "3" + d +
                             "cpu=1" + d + "COMPLETED";
    std::string out;
    EXPECT_TRUE(sacct::copy_row(sacct::Header::parse(header, d), line, 2, out, d));
    // the line as --parsable2 would show it; the fields split right
    EXPECT_EQ(out, "2\tc|7|p|q|u|cpu|1|2|3|cpu=1|COMPLETED\t\\N\tc\t7\t\\N\tp|q\tu\tcpu\t1\t2\t3\tcpu=1\tCOMPLETED"
                   "\t\\N\t\\N\t\\N\t\\N\n");
    EXPECT_EQ(sacct::split("a" + d + "b|c", d).size(), 2u);
}

TEST(SacctRun, UtcTimeArgumentIgnoresTheLocalZone) {
    EXPECT_EQ(sacct::utc_time_argument(0), "1970-01-01T00:00:00");
    // 02:25 CEST on the day Europe/Berlin's clocks go back: in UTC, not ambiguous
    EXPECT_EQ(sacct::utc_time_argument(1792887900), "2026-10-25T00:25:00");
}

TEST(SacctAssoc, ReadsClusterAccountUser) {
    const auto h = sacct::AssocHeader::parse("Cluster|Account|User|Partition");
    std::string out;
    EXPECT_TRUE(sacct::assoc_copy_row(h, "c|proj1|alice|", out));
    EXPECT_TRUE(sacct::assoc_copy_row(h, "c|proj1||", out));
    EXPECT_FALSE(sacct::assoc_copy_row(h, "c|proj1", out));
    EXPECT_EQ(out, "c\tproj1\talice\nc\tproj1\t\n");
    EXPECT_THROW(sacct::AssocHeader::parse("Cluster|User"), hpcacct::Error);
}

// A line that is not text (a NUL, a byte that is not UTF-8) failed the COPY of the whole
// sync (22021): it is skipped like a line with too few fields, and the others are synced.
TEST(SacctAssoc, ALineThatIsNotTextIsSkipped) {
    const auto h = sacct::AssocHeader::parse("Cluster|Account|User");
    std::string out;
    EXPECT_FALSE(sacct::assoc_copy_row(h, std::string("c|proj1|a") + '\0' + "b", out));
    EXPECT_FALSE(sacct::assoc_copy_row(h, "c|proj1|M\xfcller", out));
    EXPECT_TRUE(sacct::assoc_copy_row(h, "c|proj1|M\xc3\xbcller", out));
    EXPECT_EQ(out, "c\tproj1\tM\xc3\xbcller\n");
}

TEST(SacctAssoc, ABarInAnAccountNameStaysInTheAccount) {
    const auto h = sacct::AssocHeader::parse("Cluster|Account|User");
    std::string out;
    EXPECT_TRUE(sacct::assoc_copy_row(h, "c|p|q|alice", out));
    EXPECT_TRUE(sacct::assoc_copy_row(h, "c|a|b|c|", out));
    EXPECT_EQ(out, "c\tp|q\talice\nc\ta|b|c\t\n");
    const auto u = sacct::AssocHeader::parse("User|Account|Cluster");
    out.clear();
    EXPECT_TRUE(sacct::assoc_copy_row(u, "alice|p|q|c", out));
    EXPECT_EQ(out, "c\tp|q\talice\n");
}

TEST(SacctRecords, ALineBreakInANameJoinsTheLinesOfItsRecord) {
    sacct::RecordJoiner j(3, "|");
    std::vector<sacct::RecordJoiner::Record> ready;
    j.add("c|nl", 2, ready);
    EXPECT_TRUE(ready.empty());
    j.add("name|root", 3, ready);
    j.add("c|plain|root", 4, ready);
    j.add("c|a", 5, ready);
    j.add("", 6, ready);       // an empty line inside a name
    j.add("b|", 7, ready);
    ASSERT_EQ(ready.size(), 3u);
    EXPECT_EQ(ready[0].text, "c|nl\nname|root");
    EXPECT_EQ(ready[0].lineno, 2);
    EXPECT_EQ(ready[1].text, "c|plain|root");
    EXPECT_EQ(ready[2].text, "c|a\n\nb|");
    EXPECT_EQ(ready[2].lineno, 5);
    EXPECT_FALSE(j.open());
}

TEST(SacctRecords, ALineThatWouldOvershootStartsTheNextRecord) {
    sacct::RecordJoiner j(3, "\x1f");
    std::vector<sacct::RecordJoiner::Record> ready;
    j.add("c\x1f" "cut", 2, ready);
    j.add("c\x1f" "x\x1f" "y", 3, ready);   // a whole record: the cut one stays short
    j.add("c\x1f" "x\x1f" "y\x1f" "z", 4, ready);  // too many: passed on as it is
    j.add("c\x1f" "end", 5, ready);
    j.finish(ready);
    ASSERT_EQ(ready.size(), 4u);
    EXPECT_EQ(ready[0].text, "c\x1f" "cut");
    EXPECT_EQ(ready[1].text, "c\x1f" "x\x1f" "y");
    EXPECT_EQ(ready[2].lineno, 4);
    EXPECT_EQ(ready[3].text, "c\x1f" "end");
    EXPECT_EQ(sacct::field_count("a\x1f" "b\x1f", "\x1f"), 3u);
}

TEST(SacctRow, ValidUtf8) {
    EXPECT_TRUE(sacct::valid_utf8("plain ascii|1"));
    EXPECT_TRUE(sacct::valid_utf8("M\xc3\xbcller|\xe2\x82\xac|\xf0\x9f\x98\x80"));
    EXPECT_FALSE(sacct::valid_utf8("M\xfcller"));          // Latin-1
    EXPECT_FALSE(sacct::valid_utf8("\xc3"));               // cut short
    EXPECT_FALSE(sacct::valid_utf8("\xc0\xaf"));           // overlong
    EXPECT_FALSE(sacct::valid_utf8("\xed\xa0\x80"));       // surrogate
    EXPECT_FALSE(sacct::valid_utf8("\xf4\x90\x80\x80"));   // beyond U+10FFFF
    EXPECT_FALSE(sacct::valid_utf8(std::string_view("a\0b", 3)));  // a NUL: no PostgreSQL text
}

// A NUL byte in a name (sacct prints it as it is) failed the COPY of the whole load (22021):
// its line is a problem like any line that is not text, shown without it.
TEST(SacctRow, ALineWithANulByteIsAProblemShownWithoutIt) {
    std::string out;
    const std::string line = std::string("c|1|p|a") + '\0' + "b|q|S|T|E|cpu=1|COMPLETED";
    EXPECT_FALSE(sacct::copy_row(sacct::Header::parse(kHeader), line, 4, out));
    EXPECT_EQ(out.find('\0'), std::string::npos);
    EXPECT_EQ(out, "4\tc|1|p|a?b|q|S|T|E|cpu=1|COMPLETED\tline 4 holds a NUL byte (shown as ?, as any non-ASCII byte)"
                   "\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\n");
    out.clear();
    std::string us_header = kHeader;
    std::replace(us_header.begin(), us_header.end(), '|', '\x1f');
    EXPECT_FALSE(sacct::copy_row(sacct::Header::parse(us_header, sacct::kDelimiter),
                                 std::string("c\x1f" "1\x1f" "p\x1f" "a") + '\0' +
                                     "b\x1f" "q\x1f" "S\x1f" "T\x1f" "E\x1f" "cpu=1\x1f" "COMPLETED",
                                 5, out, sacct::kDelimiter));
    EXPECT_EQ(out.find('\0'), std::string::npos);
}

TEST(SacctRow, ALineThatIsNotUtf8IsAProblemShownWithoutItsBadBytes) {
    std::string out;
    EXPECT_FALSE(sacct::copy_row(sacct::Header::parse(kHeader), "c|1|p|M\xfcller|q|S|T|E|cpu=1|COMPLETED", 3, out));
    EXPECT_EQ(out, "3\tc|1|p|M?ller|q|S|T|E|cpu=1|COMPLETED\tline 3 is not valid UTF-8 (its non-ASCII bytes are shown as ?)"
                   "\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\n");
}

// hpcacct.sacct_time() reads its text with parse_time(): the same forms, nothing else.
namespace {
long long instant(std::string_view text) {
    const auto t = hpcacct::sacct::parse_time(text);
    EXPECT_EQ(t.kind, hpcacct::sacct::Time::Kind::instant) << text;
    return t.seconds;
}
bool not_a_time(std::string_view text) {
    return hpcacct::sacct::parse_time(text).kind == hpcacct::sacct::Time::Kind::none;
}
}  // namespace

TEST(SacctTime, EpochSecondsUpToElevenDigits) {
    EXPECT_EQ(instant("1719835200"), 1719835200);  // 2024-07-01 12:00 UTC
    EXPECT_EQ(instant("0"), 0);
    EXPECT_EQ(instant("99999999999"), 99999999999LL);
    EXPECT_TRUE(not_a_time("999999999999"));  // 12 digits
    EXPECT_TRUE(not_a_time("-1"));
    EXPECT_TRUE(not_a_time("17198352x0"));
}

TEST(SacctTime, IsoWithAnOffsetIsThatInstant) {
    EXPECT_EQ(instant("2024-07-01T12:00:00Z"), 1719835200);
    EXPECT_EQ(instant("2024-07-01 12:00:00Z"), 1719835200);
    EXPECT_EQ(instant("2024-07-01T12:00:00+0200"), 1719835200 - 7200);
    EXPECT_EQ(instant("2024-07-01T12:00:00+02"), 1719835200 - 7200);
    EXPECT_EQ(instant("2024-07-01T12:00:00-05:30"), 1719835200 + 5 * 3600 + 1800);
    EXPECT_EQ(instant("2024-07-01T12:00:00+15:59"), 1719835200 - 15 * 3600 - 59 * 60);
    EXPECT_EQ(instant("1970-01-01T00:00:00Z"), 0);
    EXPECT_EQ(instant("0001-01-01T00:00:00Z"), -62135596800LL);
    EXPECT_EQ(instant("9999-12-31T23:59:59Z"), 253402300799LL);
    EXPECT_EQ(instant("2000-03-01T00:00:00Z"), 951868800);
}

TEST(SacctTime, IsoWithoutOffsetIsTheWallClock) {
    const auto t = hpcacct::sacct::parse_time("2024-07-01T12:00:00");
    EXPECT_EQ(t.kind, hpcacct::sacct::Time::Kind::local);
    EXPECT_EQ(t.seconds, 1719835200);
    EXPECT_EQ(hpcacct::sacct::parse_time("2024-02-29 00:00:00").kind, hpcacct::sacct::Time::Kind::local);
}

TEST(SacctTime, AnythingElseIsNotATime) {
    for (const char* text : {"", "Unknown", "None", "2024-13-01T00:00:00", "2023-02-29T00:00:00",
                             "2100-02-29T00:00:00", "2024-04-31T00:00:00", "2024-01-00T00:00:00",
                             "2024-01-01T24:00:00", "2024-01-01T00:60:00", "2024-01-01T00:00:60",
                             "0000-01-01T00:00:00", "2024-01-01t00:00:00", "2024-01-01T00:00:00z",
                             " 2024-01-01T00:00:00", "2024-01-01T00:00:00 ", "2024-1-01T00:00:00",
                             "2024-01-01T00:00:00+16", "2024-01-01T00:00:00+0560", "2024-01-01T00:00:00+5",
                             "2024-01-01T00:00:00+05:3", "2024-01-01T00:00:00+05-30", "2024-01-01T00:00:00.5",
                             "2024-01-01T00:00:00+05:30:00", "+2024-01-01T00:00:00", "2024-01-01T00:00"}) {
        EXPECT_TRUE(not_a_time(text)) << text;
    }
}
