// Business rules of the `account` entity type (docs/handlers.md).
//
// Each top-level function is a command: POST /v1/entities/account/{id}/commands/{name}.
// It gets the account's state (change it in place), the request body and
// ctx = {command_id, version, exists, now}; what it returns is the reply's
// `response`. Throwing rejects the command with 422 and writes nothing.
// Functions starting with '_' are helpers, not commands.
//
// Amounts are whole numbers of cents, so the arithmetic is exact.

function _amount(request) {
  var a = request.amount;
  if (typeof a !== 'number' || a !== Math.floor(a) || a <= 0 || a > 1e12) {
    throw new Error('amount must be a whole number of cents between 1 and 10^12');
  }
  return a;
}

function _mustBeOpen(state, ctx) {
  if (!ctx.exists) throw new Error('the account is not open');
}

// Takes amount off the balance, never below zero.
function _debit(state, request) {
  var a = _amount(request);
  if (a > state.balance) {
    throw new Error('insufficient funds: the balance is ' + state.balance + ', the debit ' + a);
  }
  state.balance -= a;
  return a;
}

function open(state, request, ctx) {
  if (ctx.exists) throw new Error('the account is already open');
  if (typeof request.owner !== 'string' || request.owner.length === 0) {
    throw new Error('owner must be a non-empty string');
  }
  state.owner = request.owner;
  state.balance = 0;
  state.opened_at = new Date(ctx.now).toISOString();
  return {balance: state.balance};
}

function deposit(state, request, ctx) {
  _mustBeOpen(state, ctx);
  state.balance += _amount(request);
  return {balance: state.balance};
}

function withdraw(state, request, ctx) {
  _mustBeOpen(state, ctx);
  _debit(state, request);
  return {balance: state.balance};
}

// The debit half of a transfer to account `to`. The caller sends the credit
// (`deposit` on `to`) after this succeeds, with its own Idempotency-Key: each
// command changes one entity.
function transfer_out(state, request, ctx) {
  _mustBeOpen(state, ctx);
  if (typeof request.to !== 'string' || request.to.length === 0) {
    throw new Error('to must name the account that receives the transfer');
  }
  var a = _debit(state, request);
  state.last_transfer = {to: request.to, amount: a, command_id: ctx.command_id};
  return {balance: state.balance, to: request.to, amount: a};
}
