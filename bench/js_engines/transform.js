// The view-code workload of js_engines_bench (ES2020): one event in, one
// projected row out; transform_batch maps a whole array of events.
const transform = ({id, version, state, before, command}) => ({
  id,
  owner: state.owner?.name ?? null,
  balance: state.balance,
  delta: state.balance - (before?.balance ?? 0),
  tags: [...(state.tags ?? [])].join(','),
  label: `${command}:${version}`,
});

const transform_batch = (events) => events.map(transform);
