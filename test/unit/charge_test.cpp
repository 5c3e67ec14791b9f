#include "core/charge.hpp"
#include "core/error.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace tres = hpcacct::tres;
using hpcacct::charge::equivalents;
using hpcacct::charge::job_charge;
using hpcacct::charge::whole_nodes;

namespace {

struct Value {
    std::vector<unsigned char> bytes;
    explicit Value(const std::string& text) {
        tres::Vector v;
        tres::parse(text, v);
        bytes.resize(v.packed_size());
        v.pack(bytes.data());
    }
    tres::View view() const { return tres::View(bytes.data(), bytes.size()); }
};

double eq(const char* request, const char* bundle) { return equivalents(Value(request).view(), Value(bundle).view()); }

double charge(const char* request, double hours, const char* bundle, double rate, const char* node = nullptr) {
    const Value r(request), b(bundle);
    if (node == nullptr) return job_charge(r.view(), hours, b.view(), rate, nullptr);
    const Value n(node);
    const tres::View nv = n.view();
    return job_charge(r.view(), hours, b.view(), rate, &nv);
}

}  // namespace

TEST(Equivalents, ComputeCanadaCoreEquivalents) {
    EXPECT_DOUBLE_EQ(eq("cpu=2,mem=4G", "cpu=1,mem=4G"), 2);
    EXPECT_DOUBLE_EQ(eq("cpu=2,mem=10G", "cpu=1,mem=4G"), 2.5);
    EXPECT_DOUBLE_EQ(eq("cpu=1,mem=8G", "cpu=1,mem=4G"), 2);
}

TEST(Equivalents, ComputeCanadaGpuEquivalents) {
    EXPECT_DOUBLE_EQ(eq("gres/gpu=2,cpu=6,mem=32G", "gres/gpu=1,cpu=6,mem=32G"), 2);
    EXPECT_DOUBLE_EQ(eq("gres/gpu=1,cpu=9,mem=32G", "gres/gpu=1,cpu=6,mem=32G"), 1.5);
    EXPECT_DOUBLE_EQ(eq("gres/gpu=1,cpu=6,mem=48G", "gres/gpu=1,cpu=6,mem=32G"), 1.5);
}

TEST(Equivalents, IgnoresComponentsTheBundleDoesNotName) {
    EXPECT_DOUBLE_EQ(eq("cpu=4,node=1,billing=9", "cpu=1"), 4);
    EXPECT_DOUBLE_EQ(eq("license/x=1", "cpu=1,mem=4G"), 0);
    EXPECT_DOUBLE_EQ(eq("", "cpu=1"), 0);
}

TEST(Equivalents, EmptyBundleIsAnError) {
    EXPECT_THROW(eq("cpu=1", ""), hpcacct::Error);
}

TEST(Charge, HlrnFigures) {
    EXPECT_DOUBLE_EQ(charge("cpu=12,node=1", 1, "cpu=1", 1.0 / 12), 1);        // Data node
    EXPECT_DOUBLE_EQ(charge("cpu=16,node=1", 1, "cpu=1", 3.0 / 16), 3);        // Pre/Post
    EXPECT_DOUBLE_EQ(charge("cpu=1,node=1", 1, "cpu=1", 1.0 / 12, "cpu=24"), 2);  // XC30, whole node
    EXPECT_DOUBLE_EQ(charge("cpu=8,node=1", 1, "cpu=1", 1.0 / 8, "cpu=32"), 4);   // SMP, whole node
}

TEST(Charge, ExclusiveRoundsUpToWholeNodes) {
    const Value node("cpu=24,mem=64G");
    EXPECT_EQ(whole_nodes(Value("cpu=25").view(), node.view()), 2);
    EXPECT_EQ(whole_nodes(Value("cpu=1,mem=100G").view(), node.view()), 2);
    EXPECT_EQ(whole_nodes(Value("cpu=2,node=3").view(), node.view()), 3);
    EXPECT_EQ(whole_nodes(Value("cpu=48").view(), node.view()), 2);
    EXPECT_EQ(whole_nodes(Value("").view(), node.view()), 0);
    // a fractional node count is rounded up like every other share of a node (fuzz finding)
    EXPECT_EQ(whole_nodes(Value("cpu=0,node=.1").view(), node.view()), 1);
    EXPECT_EQ(whole_nodes(Value("cpu=2,node=2.5").view(), node.view()), 3);
    // a fuzz finding: a large count stays at least itself
    EXPECT_GE(whole_nodes(Value("cpu=0,node=9007199254470992").view(), node.view()), 9007199254470992.0);
    EXPECT_THROW(whole_nodes(Value("cpu=1").view(), Value("").view()), hpcacct::Error);
}

TEST(Charge, RejectsNegativeOrNonFiniteHoursAndRates) {
    EXPECT_THROW(charge("cpu=1", -1, "cpu=1", 1), hpcacct::Error);
    EXPECT_THROW(charge("cpu=1", NAN, "cpu=1", 1), hpcacct::Error);
    EXPECT_THROW(charge("cpu=1", 1, "cpu=1", -0.5), hpcacct::Error);
    EXPECT_THROW(charge("cpu=1", 1, "cpu=1", INFINITY), hpcacct::Error);
    EXPECT_DOUBLE_EQ(charge("cpu=1", 0, "cpu=1", 1), 0);
}

TEST(Charge, GenerationWeightIsARate) {
    EXPECT_DOUBLE_EQ(charge("gres/gpu:k20=4", 3, "gres/gpu:k20=1", 2), 24);
}
