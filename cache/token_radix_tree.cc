// The token radix tree behind prefix lookup (see token_radix_tree.h).
#include "cache/token_radix_tree.h"

#include <algorithm>
#include <utility>

namespace kvserve::cache {

struct TokenRadixTree::Node {
  std::vector<int32_t> edge;                          // tokens from the parent to this node
  std::map<int32_t, std::unique_ptr<Node>> children;  // keyed by the child's first edge token
  std::vector<EntryId> ids;                           // entries whose sequence ends here
};

TokenRadixTree::TokenRadixTree() : root_(std::make_unique<Node>()) {}
TokenRadixTree::~TokenRadixTree() = default;

void TokenRadixTree::Insert(absl::Span<const int32_t> tokens, EntryId id) {
  if (tokens.empty()) return;
  Node* node = root_.get();
  size_t depth = 0;
  while (depth < tokens.size()) {
    auto it = node->children.find(tokens[depth]);
    if (it == node->children.end()) {
      auto leaf = std::make_unique<Node>();
      leaf->edge.assign(tokens.begin() + depth, tokens.end());
      leaf->ids.push_back(id);
      node->children.emplace(tokens[depth], std::move(leaf));
      return;
    }
    Node* child = it->second.get();
    size_t k = 0;
    while (k < child->edge.size() && depth + k < tokens.size() &&
           child->edge[k] == tokens[depth + k]) {
      ++k;
    }
    if (k < child->edge.size()) {
      // The sequence leaves (or ends inside) the child's edge: split the edge at k.
      auto mid = std::make_unique<Node>();
      mid->edge.assign(child->edge.begin(), child->edge.begin() + k);
      std::unique_ptr<Node> rest = std::move(it->second);
      rest->edge.erase(rest->edge.begin(), rest->edge.begin() + k);
      const int32_t rest_key = rest->edge.front();
      mid->children.emplace(rest_key, std::move(rest));
      child = mid.get();
      it->second = std::move(mid);
    }
    node = child;
    depth += k;
  }
  node->ids.push_back(id);
}

bool TokenRadixTree::Erase(absl::Span<const int32_t> tokens, EntryId id) {
  if (tokens.empty()) return false;
  // The path of nodes from the root to the node where `tokens` ends.
  std::vector<Node*> path = {root_.get()};
  size_t depth = 0;
  while (depth < tokens.size()) {
    Node* node = path.back();
    auto it = node->children.find(tokens[depth]);
    if (it == node->children.end()) return false;
    Node* child = it->second.get();
    if (child->edge.size() > tokens.size() - depth ||
        !std::equal(child->edge.begin(), child->edge.end(), tokens.begin() + depth)) {
      return false;
    }
    depth += child->edge.size();
    path.push_back(child);
  }
  Node* node = path.back();
  auto pos = std::find(node->ids.begin(), node->ids.end(), id);
  if (pos == node->ids.end()) return false;
  node->ids.erase(pos);

  // Restore the invariants: a non-root node has ids or at least two children.
  auto merge_with_only_child = [](Node* n) {
    std::unique_ptr<Node> child = std::move(n->children.begin()->second);
    n->children.clear();
    n->edge.insert(n->edge.end(), child->edge.begin(), child->edge.end());
    n->children = std::move(child->children);
    n->ids = std::move(child->ids);
  };
  for (size_t i = path.size() - 1; i > 0; --i) {
    Node* n = path[i];
    Node* parent = path[i - 1];
    if (!n->ids.empty()) break;
    if (n->children.empty()) {
      parent->children.erase(n->edge.front());
      continue;  // the parent may now be removable or mergeable
    }
    if (n->children.size() == 1) merge_with_only_child(n);
    break;
  }
  return true;
}

TokenRadixTree::Walk TokenRadixTree::Follow(absl::Span<const int32_t> tokens,
                                            int64_t max_length) const {
  const int64_t limit = std::min<int64_t>(static_cast<int64_t>(tokens.size()), max_length);
  Walk walk;
  walk.node = root_.get();
  while (walk.depth < limit) {
    auto it = walk.node->children.find(tokens[walk.depth]);
    if (it == walk.node->children.end()) break;
    const Node* child = it->second.get();
    const int64_t edge = static_cast<int64_t>(child->edge.size());
    int64_t k = 0;
    while (k < edge && walk.depth + k < limit && child->edge[k] == tokens[walk.depth + k]) ++k;
    walk.depth += k;
    if (k < edge) {
      walk.partial_child = child;
      break;
    }
    walk.node = child;
    if (!child->ids.empty()) {
      walk.deepest_terminal = child;
      walk.terminal_depth = walk.depth;
    }
  }
  return walk;
}

int64_t TokenRadixTree::CommonPrefixLength(absl::Span<const int32_t> tokens) const {
  return Follow(tokens, static_cast<int64_t>(tokens.size())).depth;
}

TokenRadixTree::Match TokenRadixTree::LongestPrefix(absl::Span<const int32_t> tokens,
                                                    int64_t max_length) const {
  const Walk walk = Follow(tokens, max_length);
  if (walk.depth <= 0) return {};
  const Node* node = walk.partial_child;
  if (node == nullptr) {
    if (!walk.node->ids.empty()) return {walk.depth, walk.node->ids};
    node = walk.node->children.begin()->second.get();  // a non-root node without ids has children
  }
  while (node->ids.empty()) node = node->children.begin()->second.get();
  return {walk.depth, node->ids};
}

TokenRadixTree::Match TokenRadixTree::LongestStoredPrefix(absl::Span<const int32_t> tokens,
                                                          int64_t max_length) const {
  const Walk walk = Follow(tokens, max_length);
  if (walk.deepest_terminal == nullptr) return {};
  return {walk.terminal_depth, walk.deepest_terminal->ids};
}

bool TokenRadixTree::empty() const { return root_->children.empty(); }

int64_t TokenRadixTree::num_nodes() const {
  int64_t count = 0;
  std::vector<const Node*> stack = {root_.get()};
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    for (const auto& [token, child] : n->children) {
      ++count;
      stack.push_back(child.get());
    }
  }
  return count;
}

}  // namespace kvserve::cache
