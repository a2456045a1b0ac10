// The aggregate workload of js_engines_bench: the operations one event makes
// on a table of sums per owner (ES5, so every engine runs the same file).
function aggregate(e) {
  var ops = [];
  if (e.before) {
    ops.push({table: 'by_owner', key: {owner: e.before.owner.name}, add: {balance: -e.before.balance, n: -1}});
  }
  ops.push({table: 'by_owner', key: {owner: e.state.owner.name}, add: {balance: e.state.balance, n: 1}});
  return ops;
}
