// A CPU-bound handler for measuring what the JavaScript limits' checks cost
// (docs/BENCHMARKS.md, "Hardening"): `record` runs 20,000 iterations of
// plain arithmetic and property access per call, so the interpreter's
// instruction-count check fires about as often as it can per call, and no
// native call or allocation dominates.
function record(state, request, ctx) {
  if (typeof request.n !== 'number') throw new Error('n must be a number');
  var acc = 0;
  var o = {a: 1, b: 2};
  for (var i = 0; i < 20000; i++) {
    acc = (acc + i * o.a + o.b) % 1000003;
  }
  state.n = request.n;
  state.acc = acc;
  return {acc: acc};
}
