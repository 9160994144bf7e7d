package client

import (
	"reflect"
	"testing"
)

// A routed fetch asks each leader for its shards, sharing the events asked
// for by shards; when there are fewer events than nodes, the nodes take
// turns.
func TestSplitFetch(t *testing.T) {
	abc := []string{"a", "b", "c", "a", "b", "c"}
	for _, tc := range []struct {
		name    string
		leaders []string
		events  int
		start   int
		want    []fetchPart
	}{
		{"by leader", abc, 100, 0, []fetchPart{{"a", []int{0, 3}, 34}, {"b", []int{1, 4}, 33}, {"c", []int{2, 5}, 33}}},
		{"what is left over from start on", abc, 100, 2, []fetchPart{{"a", []int{0, 3}, 33}, {"b", []int{1, 4}, 33}, {"c", []int{2, 5}, 34}}},
		{"by shards led", []string{"a", "a", "b"}, 10, 0, []fetchPart{{"a", []int{0, 1}, 7}, {"b", []int{2}, 3}}},
		{"fewer events than nodes", abc, 2, 1, []fetchPart{{"b", []int{1, 4}, 1}, {"c", []int{2, 5}, 1}}},
		{"turns", abc, 1, 5, []fetchPart{{"c", []int{2, 5}, 1}}},
		{"shards without a known leader go to via", []string{"", "b", ""}, 3, 0, []fetchPart{{"v", []int{0, 2}, 2}, {"b", []int{1}, 1}}},
		{"nothing known", nil, 100, 0, nil},
	} {
		if got := splitFetch(tc.leaders, "v", tc.events, tc.start); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: splitFetch(%q, %d, %d) = %+v, want %+v", tc.name, tc.leaders, tc.events, tc.start, got, tc.want)
		}
	}
}
