#include "core/on_threads.h"

#include <system_error>
#include <thread>
#include <vector>

#include "core/failpoint.h"

namespace sluice {

void OnThreads(size_t n, const std::function<void(size_t)>& work) {
  if (n == 0) return;
  std::vector<std::thread> threads;
  threads.reserve(n - 1);  // emplace_back never reallocates: a failed start throws system_error only
  for (size_t k = 1; k < n; ++k) {
    try {
      if (SLUICE_FAILPOINT("on_threads.start")) {
        throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
      }
      threads.emplace_back(work, k);
    } catch (const std::system_error&) {
      work(k);  // no thread to be had: here, in turn
    }
  }
  work(0);
  for (std::thread& t : threads) t.join();
}

}  // namespace sluice
