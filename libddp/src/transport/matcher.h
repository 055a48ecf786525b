// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Matcher: the tag matching of every transport, for one peer.
//
// A receive matches the first message from its peer with the same tag (per tag, in order); the
// payload length must be equal. Messages and receives whose tags share a group
// (tag >> kTagGroupShift: one collective call) must carry equal descriptors, so ranks that
// disagree about what they are doing get an error naming both calls instead of corrupt data or
// a hang. The check is O(1): a group's descriptor is kept once with a count of its entries.
//
// `Early` is what a transport keeps of a message that arrived before its receive (its header
// with the payload, or where the payload still waits); it needs `uint64_t tag() const`,
// `const Descriptor& descriptor() const` and `uint64_t bytes() const`.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "transport/transport.h"

namespace ddp::transport {

// A receive posted and not yet matched.
struct PostedRecv {
  RequestPtr request;
  uint64_t tag = 0;
  Descriptor descriptor;
  char* data = nullptr;
  size_t bytes = 0;
};

template <class Early>
class Matcher {
 public:
  // A message with `tag` arrived: the receive it matches (taken), if one is posted.
  std::optional<PostedRecv> TakePosted(uint64_t tag) { return TakeFirst(posted_, tag, false); }
  // A receive for `tag` is posted: the early message it matches (taken), if one arrived.
  std::optional<Early> TakeEarly(uint64_t tag) { return TakeFirst(early_, tag, true); }
  void Post(PostedRecv op) {
    Join(op.tag, op.descriptor, /*early=*/false);
    posted_[op.tag].push_back(std::move(op));
  }
  void AddEarly(Early e) {
    const uint64_t tag = e.tag();
    Join(tag, e.descriptor(), /*early=*/true);
    early_[tag].push_back(std::move(e));
  }

  // Another receive or message of `tag`'s group with a descriptor other than `descriptor`: its
  // descriptor, and whether it came from the peer (an early message) or from this rank (a
  // receive). Nothing when the group agrees.
  struct Conflict {
    Descriptor other;
    bool from_peer = false;
  };
  std::optional<Conflict> FindConflict(uint64_t tag, const Descriptor& descriptor) const {
    auto it = groups_.find(tag >> kTagGroupShift);
    if (it == groups_.end() || it->second.descriptor == descriptor) return std::nullopt;
    return Conflict{it->second.descriptor, it->second.early > 0};
  }

  // Whether a receive other than a notification is posted (this rank expects data).
  bool ExpectsData() const { return waiting_posted_ > 0; }
  // Takes the posted notification receives (a goodbye completes them).
  std::vector<PostedRecv> TakeNotifications() { return TakeIf(true); }
  // Takes every posted receive (a failure completes them).
  std::vector<PostedRecv> TakeAllPosted() {
    std::vector<PostedRecv> all = TakeIf(false);
    std::vector<PostedRecv> rest = TakeIf(true);
    all.insert(all.end(), std::make_move_iterator(rest.begin()),
               std::make_move_iterator(rest.end()));
    return all;
  }
  // Forgets every early message (calls fn on each first).
  template <class Fn>
  void DropEarly(Fn&& fn) {
    for (auto& [tag, list] : early_) {
      for (Early& e : list) {
        fn(e);
        Leave(tag, /*early=*/true);
      }
    }
    early_.clear();
  }
  template <class Fn>
  void ForEachEarly(Fn&& fn) const {
    for (const auto& [tag, list] : early_) {
      for (const Early& e : list) fn(e);
    }
  }

 private:
  struct Group {
    Descriptor descriptor;
    int posted = 0;
    int early = 0;
  };

  void Join(uint64_t tag, const Descriptor& descriptor, bool early) {
    Group& g = groups_[tag >> kTagGroupShift];
    if (g.posted + g.early == 0) g.descriptor = descriptor;
    ++(early ? g.early : g.posted);
    if (!early && !IsNotificationTag(tag)) ++waiting_posted_;
  }
  void Leave(uint64_t tag, bool early) {
    auto it = groups_.find(tag >> kTagGroupShift);
    if (it != groups_.end()) {
      Group& g = it->second;
      --(early ? g.early : g.posted);
      if (g.posted + g.early == 0) groups_.erase(it);
    }
    if (!early && !IsNotificationTag(tag)) --waiting_posted_;
  }
  // The first entry of `tag` in `queues` (posted receives, or early messages), taken.
  template <class T>
  std::optional<T> TakeFirst(absl::flat_hash_map<uint64_t, std::deque<T>>& queues, uint64_t tag,
                             bool early) {
    auto it = queues.find(tag);
    if (it == queues.end()) return std::nullopt;
    T first = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) queues.erase(it);
    Leave(tag, early);
    return first;
  }
  // The posted receives on notification tags (`notifications`) or the others.
  std::vector<PostedRecv> TakeIf(bool notifications) {
    std::vector<PostedRecv> taken;
    for (auto it = posted_.begin(); it != posted_.end();) {
      if (IsNotificationTag(it->first) != notifications) {
        ++it;
        continue;
      }
      for (PostedRecv& op : it->second) {
        Leave(op.tag, /*early=*/false);
        taken.push_back(std::move(op));
      }
      posted_.erase(it++);
    }
    return taken;
  }

  absl::flat_hash_map<uint64_t, std::deque<PostedRecv>> posted_;
  absl::flat_hash_map<uint64_t, std::deque<Early>> early_;
  absl::flat_hash_map<uint64_t, Group> groups_;
  int waiting_posted_ = 0;
};

}  // namespace ddp::transport
