// The aggregate view of bench/scenarios/views.bench: balance, accounts and
// events per owner (the backlog's 1,000 owners), kept exactly once.
function aggregate(event) {
  var ops = [];
  if (event.before) {
    ops.push({table: 'owner_totals', key: {owner: event.before.owner}, add: {balance: -event.before.balance, accounts: -1}});
  }
  if (event.state) {
    ops.push({table: 'owner_totals', key: {owner: event.state.owner}, add: {balance: event.state.balance, accounts: 1, events: 1}});
  }
  return ops;
}
