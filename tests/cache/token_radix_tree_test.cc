// Tests for TokenRadixTree: longest-prefix matching in both modes, shared sequences, and
// edge splitting, merging and pruning.
#include "cache/token_radix_tree.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace kvserve::cache {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using Tokens = std::vector<int32_t>;

// root -> [1 2] -> [3] (id 1) -> [4 5] (id 2)
//               -> [9] (id 3)
// root -> [7] (id 4)
void Fill(TokenRadixTree& tree) {
  tree.Insert(Tokens{1, 2, 3}, 1);
  tree.Insert(Tokens{1, 2, 3, 4, 5}, 2);
  tree.Insert(Tokens{1, 2, 9}, 3);
  tree.Insert(Tokens{7}, 4);
}

TEST(TokenRadixTreeTest, CommonPrefixLength) {
  TokenRadixTree tree;
  EXPECT_TRUE(tree.empty());
  Fill(tree);
  EXPECT_FALSE(tree.empty());
  EXPECT_EQ(tree.num_nodes(), 5);
  EXPECT_EQ(tree.CommonPrefixLength(Tokens{1, 2, 3, 4, 5, 6}), 5);
  EXPECT_EQ(tree.CommonPrefixLength(Tokens{1, 2, 3, 4}), 4);
  EXPECT_EQ(tree.CommonPrefixLength(Tokens{1, 2, 8}), 2);
  EXPECT_EQ(tree.CommonPrefixLength(Tokens{5}), 0);
  EXPECT_EQ(tree.CommonPrefixLength(Tokens{}), 0);
}

TEST(TokenRadixTreeTest, LongestStoredPrefixEndsAtStoredBoundaries) {
  TokenRadixTree tree;
  Fill(tree);
  TokenRadixTree::Match m = tree.LongestStoredPrefix(Tokens{1, 2, 3, 4, 5, 6}, 100);
  EXPECT_EQ(m.length, 5);
  EXPECT_THAT(m.ids, ElementsAre(2));
  m = tree.LongestStoredPrefix(Tokens{1, 2, 3, 4, 5, 6}, 4);  // the cap hides id 2
  EXPECT_EQ(m.length, 3);
  EXPECT_THAT(m.ids, ElementsAre(1));
  m = tree.LongestStoredPrefix(Tokens{1, 2, 3, 4, 7}, 100);  // leaves id 2's edge part-way
  EXPECT_EQ(m.length, 3);
  EXPECT_THAT(m.ids, ElementsAre(1));
  m = tree.LongestStoredPrefix(Tokens{1, 2, 8}, 100);  // [1 2] is only a branch point
  EXPECT_EQ(m.length, 0);
  EXPECT_THAT(m.ids, IsEmpty());
  m = tree.LongestStoredPrefix(Tokens{7, 7}, 100);
  EXPECT_EQ(m.length, 1);
  EXPECT_THAT(m.ids, ElementsAre(4));
}

TEST(TokenRadixTreeTest, LongestPrefixMayEndInsideAnEntry) {
  TokenRadixTree tree;
  Fill(tree);
  // Part-way into [4 5]: the entry that goes on is id 2.
  TokenRadixTree::Match m = tree.LongestPrefix(Tokens{1, 2, 3, 4, 7}, 100);
  EXPECT_EQ(m.length, 4);
  EXPECT_THAT(m.ids, ElementsAre(2));
  // At the branch point [1 2]: the nearest entry below along the smallest token (3).
  m = tree.LongestPrefix(Tokens{1, 2, 8}, 100);
  EXPECT_EQ(m.length, 2);
  EXPECT_THAT(m.ids, ElementsAre(1));
  // Exactly at a stored end: that entry.
  m = tree.LongestPrefix(Tokens{1, 2, 3, 4, 5, 6}, 3);
  EXPECT_EQ(m.length, 3);
  EXPECT_THAT(m.ids, ElementsAre(1));
  m = tree.LongestPrefix(Tokens{1, 2, 3, 4, 5, 6}, 100);
  EXPECT_EQ(m.length, 5);
  EXPECT_THAT(m.ids, ElementsAre(2));
  // The cap stops the walk inside [1 2].
  m = tree.LongestPrefix(Tokens{1, 2, 3}, 1);
  EXPECT_EQ(m.length, 1);
  EXPECT_THAT(m.ids, ElementsAre(1));
  m = tree.LongestPrefix(Tokens{6}, 100);
  EXPECT_EQ(m.length, 0);
  EXPECT_THAT(m.ids, IsEmpty());
  m = tree.LongestPrefix(Tokens{1, 2}, 0);
  EXPECT_EQ(m.length, 0);
}

TEST(TokenRadixTreeTest, SeveralEntriesShareASequence) {
  TokenRadixTree tree;
  tree.Insert(Tokens{4, 4}, 10);
  tree.Insert(Tokens{4, 4}, 11);
  EXPECT_EQ(tree.num_nodes(), 1);
  EXPECT_THAT(tree.LongestStoredPrefix(Tokens{4, 4, 4}, 100).ids, ElementsAre(10, 11));
  EXPECT_TRUE(tree.Erase(Tokens{4, 4}, 10));
  EXPECT_THAT(tree.LongestStoredPrefix(Tokens{4, 4, 4}, 100).ids, ElementsAre(11));
  EXPECT_FALSE(tree.Erase(Tokens{4, 4}, 10));
}

TEST(TokenRadixTreeTest, InsertingAShorterSequenceSplitsAnEdge) {
  TokenRadixTree tree;
  tree.Insert(Tokens{1, 2, 3, 4}, 1);
  EXPECT_EQ(tree.num_nodes(), 1);
  tree.Insert(Tokens{1, 2}, 2);
  EXPECT_EQ(tree.num_nodes(), 2);
  TokenRadixTree::Match m = tree.LongestStoredPrefix(Tokens{1, 2, 3}, 100);
  EXPECT_EQ(m.length, 2);
  EXPECT_THAT(m.ids, ElementsAre(2));
  m = tree.LongestStoredPrefix(Tokens{1, 2, 3, 4}, 100);
  EXPECT_EQ(m.length, 4);
  EXPECT_THAT(m.ids, ElementsAre(1));
}

TEST(TokenRadixTreeTest, EraseMergesAndPrunes) {
  TokenRadixTree tree;
  Fill(tree);
  EXPECT_FALSE(tree.Erase(Tokens{1, 2}, 1));           // a branch point, not an entry
  EXPECT_FALSE(tree.Erase(Tokens{1, 2, 3, 4, 5}, 9));  // wrong id
  EXPECT_FALSE(tree.Erase(Tokens{1, 2, 3, 4}, 2));     // ends inside an edge
  EXPECT_EQ(tree.num_nodes(), 5);

  // [3] loses its entry and has one child: merged into [3 4 5].
  EXPECT_TRUE(tree.Erase(Tokens{1, 2, 3}, 1));
  EXPECT_EQ(tree.num_nodes(), 4);
  EXPECT_EQ(tree.LongestStoredPrefix(Tokens{1, 2, 3, 4}, 100).length, 0);
  EXPECT_EQ(tree.LongestStoredPrefix(Tokens{1, 2, 3, 4, 5}, 100).length, 5);

  // The leaf [9] goes; the branch point [1 2] is left with one child and merges with it.
  EXPECT_TRUE(tree.Erase(Tokens{1, 2, 9}, 3));
  EXPECT_EQ(tree.num_nodes(), 2);
  EXPECT_EQ(tree.CommonPrefixLength(Tokens{1, 2, 9}), 2);
  TokenRadixTree::Match m = tree.LongestPrefix(Tokens{1, 2, 3, 4, 5, 6}, 100);
  EXPECT_EQ(m.length, 5);
  EXPECT_THAT(m.ids, ElementsAre(2));

  EXPECT_TRUE(tree.Erase(Tokens{1, 2, 3, 4, 5}, 2));
  EXPECT_EQ(tree.num_nodes(), 1);
  EXPECT_TRUE(tree.Erase(Tokens{7}, 4));
  EXPECT_TRUE(tree.empty());
  EXPECT_EQ(tree.num_nodes(), 0);
  EXPECT_EQ(tree.CommonPrefixLength(Tokens{1, 2}), 0);
}

TEST(TokenRadixTreeTest, EmptySequencesAreIgnored) {
  TokenRadixTree tree;
  tree.Insert(Tokens{}, 1);
  EXPECT_TRUE(tree.empty());
  EXPECT_FALSE(tree.Erase(Tokens{}, 1));
}

}  // namespace
}  // namespace kvserve::cache
