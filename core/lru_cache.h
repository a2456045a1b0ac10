// A bounded map that forgets the least recently used entry when full.
// Not thread-safe: each owner (a partition worker, a sink runner) has its own.
#pragma once

#include <cstddef>
#include <list>
#include <unordered_map>
#include <utility>

namespace sluice {

template <typename K, typename V, typename Hash = std::hash<K>>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

  // The value for key, marked as most recently used; nullptr when absent.
  V* Find(const K& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return &it->second->second;
  }

  // Inserts or replaces; evicts the least recently used entry when full.
  V& Put(const K& key, V value) {
    if (auto* existing = Find(key)) {
      *existing = std::move(value);
      return *existing;
    }
    if (index_.size() >= capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    order_.emplace_front(key, std::move(value));
    index_.emplace(key, order_.begin());
    return order_.front().second;
  }

  void Erase(const K& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return;
    order_.erase(it->second);
    index_.erase(it);
  }

  void Clear() {
    index_.clear();
    order_.clear();
  }
  // Empties the cache and hands its entries over in a cache of the same
  // capacity (whose owner may destroy them elsewhere).
  LruCache TakeAll() {
    LruCache out(capacity_);
    out.order_.swap(order_);  // the index's iterators stay valid, now into out
    out.index_.swap(index_);
    return out;
  }
  size_t size() const { return index_.size(); }

 private:
  size_t capacity_;
  std::list<std::pair<K, V>> order_;
  std::unordered_map<K, typename std::list<std::pair<K, V>>::iterator, Hash> index_;
};

}  // namespace sluice
