// A handler file for fuzz_config_loader's configs: the loader only reads it.
function deposit(state, request) { state.balance = (state.balance || 0) + request.amount; return {}; }
