// transform.js in ES5, for Duktape 2.7 (which cannot parse the ES2020
// syntax): the same output for the same event, byte for byte.
function _nullish(v) { return v === null || v === undefined; }

function transform(e) {
  var state = e.state;
  var before = e.before;
  var owner = _nullish(state.owner) ? undefined : state.owner.name;
  var before_balance = _nullish(before) ? undefined : before.balance;
  var tags = _nullish(state.tags) ? [] : state.tags;
  return {
    id: e.id,
    owner: _nullish(owner) ? null : owner,
    balance: state.balance,
    delta: state.balance - (_nullish(before_balance) ? 0 : before_balance),
    tags: Array.prototype.slice.call(tags).join(','),
    label: String(e.command) + ':' + String(e.version)
  };
}

function transform_batch(events) { return events.map(transform); }
