// The JavaScript side of the writer benchmark (bench/scenarios/writer.bench):
// `record` takes the body the built-in `patch` gets in the same run,
// {"n": <i>, "note": "..."}, checks it, and keeps a running count and sum,
// so the two rows of the table differ only by who computes the new state.
function record(state, request, ctx) {
  if (typeof request.n !== 'number' || request.n < 0) throw new Error('n must be a non-negative number');
  if (typeof request.note !== 'string') throw new Error('note must be a string');
  state.n = request.n;
  state.note = request.note;
  state.count = (state.count || 0) + 1;
  state.sum = (state.sum || 0) + request.n;
  state.last_command = ctx.command_id;
  return {count: state.count, sum: state.sum};
}
