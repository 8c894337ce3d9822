// The price of one fysched launch under a machine profile (CostModel's
// replay puts it on the compute stream).
#pragma once

#include "passes/Analysis/Profile.h"
#include "dialects/FySched/FySchedOps.h"

namespace fuyou {

// The bytes a launch's buffers hold (read and written).
int64_t launchBytes(fysched::LaunchOp launch);
// Seconds the launch takes: the kernel times of `profile` where they have
// its kernel at its bytes (`timed` set), else its price by the profile's
// rates. cuda: the CUDA target; operands16: products on 16-bit copies of
// their operands (bf16 / fp16).
double launchCost(fysched::LaunchOp launch, const Profile &profile, bool cuda, bool operands16, bool &timed);

} // namespace fuyou
