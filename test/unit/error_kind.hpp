// The kind of hpcacct::Error a call throws; a test failure when it throws none.
#pragma once

#include "core/error.hpp"

#include <gtest/gtest.h>

namespace hpcacct::testing {

template <typename F>
ErrorKind kind_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.kind();
    }
    ADD_FAILURE() << "no hpcacct::Error thrown";
    return ErrorKind::internal;
}

}  // namespace hpcacct::testing
