package topic

import "slices"

// Protocol is what herald speaks to a push endpoint. Several schemes may
// share one: http and https are both webhooks.
type Protocol int

// The protocols, one for each of the packages under internal/endpoint.
const (
	ProtocolWebhook Protocol = iota + 1 // HTTP POST
	ProtocolAMQP                        // AMQP 0-9-1
	ProtocolKafka
	ProtocolNATS
)

// Scheme is a push endpoint URI scheme herald delivers to.
type Scheme struct {
	Name     string
	Protocol Protocol
	// TLS says that the scheme's connections use TLS, so that the
	// tls_ca_file and tls_insecure_skip_verify attributes apply to them.
	TLS bool
}

// schemes is the one list of push endpoint schemes: validation accepts
// these and no others, and package delivery opens an endpoint by the
// Protocol of its scheme, so adding a scheme here is what makes herald
// accept it. The list lives in this package, not in package delivery next
// to the constructors, because validation needs it and runs in the
// controller's state machine, and this package may import none of the
// endpoint packages: they import it.
var schemes = []Scheme{
	{"http", ProtocolWebhook, false},
	{"https", ProtocolWebhook, true},
	{"amqp", ProtocolAMQP, false},
	{"amqps", ProtocolAMQP, true},
	{"kafka", ProtocolKafka, false},
	{"nats", ProtocolNATS, false},
}

// Schemes returns every push endpoint scheme herald delivers to.
func Schemes() []Scheme { return slices.Clone(schemes) }

// LookupScheme returns the push endpoint scheme called name, and whether
// there is one. Names are lower case, as url.Parse returns them.
func LookupScheme(name string) (Scheme, bool) {
	i := slices.IndexFunc(schemes, func(s Scheme) bool { return s.Name == name })
	if i < 0 {
		return Scheme{}, false
	}
	return schemes[i], true
}

// SchemeNames returns the names of the push endpoint schemes, in the order
// messages list them; with tlsOnly, only those of the schemes that use TLS.
func SchemeNames(tlsOnly bool) []string {
	var names []string
	for _, s := range schemes {
		if s.TLS || !tlsOnly {
			names = append(names, s.Name)
		}
	}
	return names
}
