// The JavaScript transform of bench/scenarios/views.bench: the Redis view
// gets a reshaped document. A sink with code is given the whole event
// (request, response and the state before, read for it), so the drain pays
// for that and the code. It reads only the state, so `sluice verify` checks
// the view.
function transform(event) {
  var s = event.state;
  return {
    owner: s.owner,
    balance: s.balance,
    note_bytes: s.note.length,
    id: event.id
  };
}
