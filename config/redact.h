// The one redaction rule for configuration values shown to a person: in
// `config check --print`, in configuration errors, and in any message that
// names a server by its URL.
//
//   - A secret field (config.h lists them) is shown as the reference it was
//     written as ("${env:NAME}", "${file:PATH}"), or as kRedactedValue when it
//     was written inline. Its value is never shown.
//   - A name that looks like a secret's (IsSecretName: sasl.password,
//     ssl.key.password, api_token, ...) marks a pass-through value (a Kafka
//     property, a plugin option) as secret too.
//   - A URL is shown by RedactUrl: where it points (scheme, host, port,
//     path) stays, its credentials (user info, query values, fragment) go.
//
// Pure functions of their arguments; safe from any thread.
#pragma once

#include <string>
#include <string_view>

namespace sluice::config {

// What a hidden value is shown as.
inline constexpr std::string_view kRedactedValue = "***";

// Whether `name` (a Kafka property, a plugin option) names a secret: it
// contains password, passwd, passphrase, secret, token or credential, or is
// a kind of key that grants access (api_key, private_key, access_key,
// ssl.key.*, a keytab, sasl.jaas.config, sasl.oauthbearer.config). Case,
// '.', '-' and '_' are ignored ("apiKey", "api-key" and "api.key" match).
bool IsSecretName(std::string_view name);

// `url` with each part of its user info, each query value and the fragment
// replaced by kRedactedValue:
//   redis://:pw@cache:6379/0         -> redis://:***@cache:6379/0
//   https://user:pw@es:9200/p?token=t -> https://***:***@es:9200/p?token=***
// The user info ends at the last '@' (a password may hold '@', ':' or '/'),
// so a path that holds '@' is over-redacted rather than leaked. Text without
// '@', '?' or '#' comes back unchanged.
std::string RedactUrl(std::string_view url);

}  // namespace sluice::config
