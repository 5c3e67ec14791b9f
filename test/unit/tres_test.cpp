#include "core/error.hpp"
#include "core/tres.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

using hpcacct::Error;
using hpcacct::ErrorKind;
namespace tres = hpcacct::tres;

namespace {

// A parsed value in packed form, as the glue stores it.
struct Packed {
    std::vector<unsigned char> bytes;
    tres::View view() const { return tres::View(bytes.data(), bytes.size()); }
};

Packed pack(const tres::Vector& v) {
    Packed p;
    p.bytes.resize(v.packed_size());
    v.pack(p.bytes.data());
    return p;
}

Packed parse(const std::string& text) {
    tres::Vector v;
    tres::parse(text, v);
    return pack(v);
}

std::string canonical(const std::string& text) {
    const Packed p = parse(text);
    const tres::View view = p.view();
    std::string out(tres::format_length(view) + 1, '\0');
    tres::format(view, out.data(), out.size());
    out.resize(out.size() - 1);
    return out;
}

ErrorKind error_kind_of(const std::string& text) {
    try {
        parse(text);
    } catch (const Error& e) {
        return e.kind();
    }
    ADD_FAILURE() << "accepted: " << text;
    return ErrorKind::internal;
}

}  // namespace

TEST(Tres, ParsesSacctAllocTres) {
    const Packed p = parse("billing=4,cpu=4,gres/gpu=1,mem=16G,node=1");
    const tres::View v = p.view();
    EXPECT_EQ(v.size(), 5u);
    EXPECT_EQ(v.get("cpu"), 4);
    EXPECT_EQ(v.get("mem"), 16384);
    EXPECT_EQ(v.get("gres/gpu"), 1);
    EXPECT_EQ(v.get("license/none"), 0);
}

TEST(Tres, CanonicalFormSortsKeysAndDropsZeros) {
    EXPECT_EQ(canonical("node=1,mem=16G,cpu=4"), "cpu=4,mem=16G,node=1");
    EXPECT_EQ(canonical("cpu=4,gres/gpu=0"), "cpu=4");
    EXPECT_EQ(canonical(""), "");
    EXPECT_EQ(canonical("  cpu=1  "), "cpu=1");
}

TEST(Tres, MemoryUnitsArePowersOf1024) {
    EXPECT_EQ(parse("mem=1.50G").view().get("mem"), 1536);
    EXPECT_EQ(parse("mem=512K").view().get("mem"), 0.5);
    EXPECT_EQ(parse("mem=2T").view().get("mem"), 2097152);
    EXPECT_EQ(parse("mem=1P").view().get("mem"), 1073741824);
    EXPECT_EQ(parse("mem=100").view().get("mem"), 100);
    EXPECT_EQ(parse("fs/disk=1G").view().get("fs/disk"), 1024);
    EXPECT_EQ(canonical("mem=1536"), "mem=1536M");
    EXPECT_EQ(canonical("mem=2048M"), "mem=2G");
    EXPECT_EQ(canonical("mem=0.5M"), "mem=512K");
    EXPECT_EQ(canonical("mem=0.3M"), "mem=0.3M");
}

TEST(Tres, OutputReadsBackToTheSameValue) {
    for (const char* text : {"cpu=3.5,mem=22500M,gres/gpu=1", "mem=0.3M", "cpu=0.1", "mem=1.5K",
                             "cpu=9007199254740992", "energy=123456789.125", "cpu=0.000001"}) {
        const std::string once = canonical(text);
        EXPECT_EQ(canonical(once), once) << text;
        EXPECT_EQ(parse(once).bytes, parse(text).bytes) << text;
    }
}

TEST(Tres, AcceptsEveryTresFamily) {
    EXPECT_EQ(parse("gres/gpu:a100=2,license/matlab@srv=1,fs/lustre=1G,bb/cray=1T,ic/ofed=1,energy=5,"
                    "pages=3,vmem=1G,billing=2")
                  .view()
                  .size(),
              9u);
}

TEST(Tres, RejectsMalformedText) {
    for (const char* text : {"cpu=4,,mem=1G", "cpu=4,", ",cpu=4", "=4", "cpu", "cpu=", "cpu=four", "cpu=4x",
                             "cpu=1e5", "cpu=4G", "mem=4X", "mem=4GB", "cpu=1,cpu=2", "cpu=0,cpu=1", "foo=1",
                             "gres/=1", "gres/gpu:=1", "CPU=1", "cpu =1", "cpu=+1", "cpu=1..2", "cpu=."}) {
        EXPECT_EQ(error_kind_of(text), ErrorKind::invalid_text) << text;
    }
}

TEST(Tres, RejectsOutOfRangeValues) {
    for (const char* text : {"cpu=-1", "cpu=-0", "cpu=NaN", "mem=inf", "cpu=Infinity", "cpu=-inf",
                             "cpu=99999999999999999999", "mem=9007199254740992G"}) {
        EXPECT_EQ(error_kind_of(text), ErrorKind::out_of_range) << text;
    }
}

// A decimal above 2^53 that rounds to 2^53 as a double is refused, not stored as 2^53; in
// every unit the limit is 2^53 MB exactly.
TEST(Tres, RefusesValuesThatRoundDownTo2Pow53) {
    for (const char* text : {"cpu=9007199254740993", "cpu=9007199254740992.5", "cpu=9007199254740992.0000001",
                             "cpu=09007199254740993", "mem=9223372036854775809K", "mem=8796093022208.001G",
                             "mem=8388608.0000000001P"}) {
        EXPECT_EQ(error_kind_of(text), ErrorKind::out_of_range) << text;
    }
    for (const char* text : {"cpu=9007199254740992", "cpu=9007199254740992.000", "cpu=009007199254740992",
                             "cpu=9007199254740991", "mem=9223372036854775808K", "mem=8796093022208G",
                             "mem=8388608P", "mem=8388607.99999P"}) {
        EXPECT_NO_THROW(parse(text)) << text;
    }
    EXPECT_EQ(canonical("mem=8388608P"), "mem=8388608P");
    EXPECT_EQ(parse("cpu=9007199254740992").view().get("cpu"), 9007199254740992.0);
}

TEST(Tres, EnforcesLimits) {
    EXPECT_EQ(error_kind_of(std::string(128, 'x') + "=1"), ErrorKind::program_limit);
    std::string many;
    for (int i = 1; i <= 65; ++i) many += (i > 1 ? "," : "") + ("license/l" + std::to_string(i)) + "=1";
    EXPECT_EQ(error_kind_of(many), ErrorKind::program_limit);
}

TEST(Tres, ErrorMessagesQuoteTheLiteral) {
    try {
        parse("cpu=-1");
        FAIL();
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "value out of range for type tres: \"cpu=-1\"");
        EXPECT_EQ(e.detail(), "\"cpu\" must not be negative");
    }
    try {
        parse(std::string(500, 'c'));
        FAIL();
    } catch (const Error& e) {
        EXPECT_LT(std::string(e.what()).size(), 160u) << "a long literal is shortened";
    }
}

// The detail shows a bounded excerpt of the offending component: copying a long one whole
// (150 MB under a backend's ulimit -v) ran out of memory, so bad input gave 53200, not 22P02.
TEST(Tres, ErrorDetailsAreBoundedWhateverTheInput) {
    const std::string long_text(1 << 20, 'x');
    for (const std::string& text : {long_text, "cpu=1" + long_text, "mem=1" + long_text, "=" + long_text,
                                    "cpu=1," + long_text}) {
        try {
            parse(text);
            ADD_FAILURE() << "accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::invalid_text);
            EXPECT_LT(std::string(e.what()).size(), 200u);
            EXPECT_LT(e.detail().size(), 400u) << e.detail().substr(0, 60);
        }
    }
}

// The excerpt is cut between characters: "\xC3..." (half an a-umlaut) is no UTF-8, which a
// client in another encoding got as 22021 "invalid byte sequence" in place of 22P02.
TEST(Tres, ErrorExcerptsEndBetweenCharacters) {
    auto utf8 = [](const std::string& s) {
        for (std::size_t i = 0; i < s.size();) {
            const auto c = static_cast<unsigned char>(s[i]);
            const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
            if (n == 0 || i + n > s.size()) return false;
            for (std::size_t k = 1; k < n; ++k)
                if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
            i += n;
        }
        return true;
    };
    for (std::size_t before : {98u, 99u, 100u}) {
        for (const std::string& ch : {std::string("\xC3\xA4"), std::string("\xE2\x82\xAC"), std::string("\xF0\x9F\x98\x80")}) {
            const std::string text = std::string(before, 'a') + ch + "=1";
            try {
                parse(text);
                ADD_FAILURE() << "accepted";
            } catch (const Error& e) {
                EXPECT_TRUE(utf8(e.what())) << before << " " << e.what();
                EXPECT_TRUE(utf8(e.detail())) << before << " " << e.detail();
            }
        }
    }
    EXPECT_EQ(hpcacct::excerpt(std::string(99, 'a') + "\xC3\xA4"), std::string(99, 'a') + "...");
}

TEST(Tres, AddMergesComponents) {
    tres::Vector sum;
    const Packed a = parse("cpu=2,mem=4G"), b = parse("cpu=1,gres/gpu=1");
    tres::add(a.view(), b.view(), sum);
    EXPECT_EQ(pack(sum).bytes, parse("cpu=3,gres/gpu=1,mem=4G").bytes);
    const Packed big = parse("cpu=9007199254740992");
    EXPECT_THROW(tres::add(big.view(), big.view(), sum), Error);
}

TEST(Tres, ScaleRejectsNegativeAndNonFinite) {
    tres::Vector out;
    const Packed a = parse("cpu=2,mem=4G");
    tres::scale(a.view(), 2.5, out);
    EXPECT_EQ(pack(out).bytes, parse("cpu=5,mem=10G").bytes);
    tres::scale(a.view(), 0, out);
    EXPECT_EQ(out.size(), 0u);
    EXPECT_THROW(tres::scale(a.view(), -1, out), Error);
    EXPECT_THROW(tres::scale(a.view(), std::numeric_limits<double>::quiet_NaN(), out), Error);
    EXPECT_THROW(tres::scale(a.view(), std::numeric_limits<double>::infinity(), out), Error);
}

TEST(Tres, CompareOrdersByKeyThenValue) {
    EXPECT_EQ(tres::compare(parse("cpu=4").view(), parse("cpu=4").view()), 0);
    EXPECT_LT(tres::compare(parse("cpu=4").view(), parse("cpu=5").view()), 0);
    EXPECT_LT(tres::compare(parse("cpu=4").view(), parse("cpu=4,mem=1").view()), 0);
    EXPECT_GT(tres::compare(parse("mem=1").view(), parse("cpu=9").view()), 0);
    EXPECT_LT(tres::compare(parse("").view(), parse("cpu=1").view()), 0);
}

TEST(Tres, InsertCheckedValidatesBinaryInput) {
    tres::Vector v;
    tres::insert_checked(v, "cpu", 4);
    EXPECT_THROW(tres::insert_checked(v, "cpu", 1), Error);  // duplicate
    EXPECT_THROW(tres::insert_checked(v, "bogus", 1), Error);
    EXPECT_THROW(tres::insert_checked(v, "mem", -1), Error);
    EXPECT_THROW(tres::insert_checked(v, "mem", std::numeric_limits<double>::quiet_NaN()), Error);
    EXPECT_THROW(tres::insert_checked(v, "mem", 1e300), Error);
    tres::insert_checked(v, "gres/gpu", 0);  // zero is not stored
    EXPECT_EQ(v.size(), 1u);
}

TEST(Tres, ViewRejectsCorruptBytes) {
    const unsigned char too_short[] = {1};
    EXPECT_THROW(tres::View(too_short, sizeof too_short), Error);
    Packed p = parse("cpu=4");
    p.bytes.pop_back();
    EXPECT_THROW(p.view(), Error);
    p = parse("cpu=4");
    p.bytes.push_back(0);
    EXPECT_THROW(p.view(), Error);
}
