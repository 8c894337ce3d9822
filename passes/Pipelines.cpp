// The placement passes as one pipeline, so that fuyou-compile and the
// planner's trial runs carry out a plan the same way.
#include "passes/Passes.h"

#include "mlir/Pass/PassManager.h"

namespace fuyou {

void addPlacementPasses(mlir::OpPassManager &pm, const PlacementOptions &o) {
  PlaceActivationsOptions place;
  place.policy = o.activations;
  place.readAhead = o.readAhead;
  place.ahead = o.activationPrefetch;
  pm.addPass(createPlaceActivations(place));
  StreamParamsOptions stream;
  stream.policy = o.params;
  stream.ahead = o.paramPrefetch;
  pm.addPass(createStreamParams(stream));
  RowsFirstOptions rows;
  rows.ahead = o.paramPrefetch;
  pm.addPass(createRowsFirst(rows));
  pm.addPass(createParamWaits());
  pm.addPass(createEarlyOffload());
  GradLandedOptions landed;
  landed.distance = o.gradLanding;
  pm.addPass(createGradLanded(landed));
  pm.addPass(createInsertDealloc());
  AsyncCopiesOptions copies;
  copies.window = o.copyWindow;
  copies.writeBehind = o.writeBehind;
  pm.addPass(createAsyncCopies(copies));
  pm.addPass(createPlanMemory());
}

} // namespace fuyou
