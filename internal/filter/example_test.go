package filter_test

import (
	"fmt"

	"herald/internal/filter"
)

func ExampleParse() {
	policy, err := filter.Parse([]byte(`{
		"$key": [{"prefix": "orders/"}],
		"type": ["order.paid", "order.refunded"],
		"total": [{"numeric": [">", 0, "<=", 500]}]
	}`), filter.Attributes)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(policy.Match(filter.Event{
		Key:     "orders/42",
		Headers: map[string]string{"type": "order.paid", "total": "129.95"},
	}))
	fmt.Println(policy.Match(filter.Event{
		Key:     "orders/43",
		Headers: map[string]string{"type": "order.paid", "total": "900"},
	}))
	fmt.Println(policy)
	// Output:
	// true
	// false
	// {"$key":[{"prefix":"orders/"}],"total":[{"numeric":[">",0,"<=",500]}],"type":["order.paid","order.refunded"]}
}

func ExampleParse_error() {
	_, err := filter.Parse([]byte(`{"price": [{"numeric": ["=>", 5]}]}`), filter.Attributes)
	fmt.Println(err)
	// Output:
	// filter policy: key "price": numeric: operator "=>" is not one of =, <, <=, >, >=
}

func ExampleParse_body() {
	policy, err := filter.Parse([]byte(`{"order": {"lines": {"sku": [{"prefix": "BK-"}]}}}`), filter.Body)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(policy.Match(filter.Event{Payload: []byte(`{"order": {"lines": [{"sku": "CD-1"}, {"sku": "BK-7"}]}}`)}))
	// Output:
	// true
}
