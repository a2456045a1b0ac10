// An aggregate view of the quick start (docs/views.md, "Aggregate views"):
// per owner, the total balance and the number of accounts, kept exactly
// once. `before` is the account's state before the event (null when it is
// opened) and `state` the state after it (null when it is deleted), so each
// event moves the account's contribution from its old figures to its new.
function aggregate(event) {
  var ops = [];
  if (event.before) {
    ops.push({table: 'balance_per_owner', key: {owner: event.before.owner},
              add: {total: -event.before.balance, accounts: -1}});
  }
  if (event.state) {
    ops.push({table: 'balance_per_owner', key: {owner: event.state.owner},
              add: {total: event.state.balance, accounts: 1}});
  }
  return ops;
}
