// Package federation holds alpd's federation tests: several real alpd
// processes, each the home broker of its own domains, talking to each other
// over HTTPS on one machine, driven black-box through people's and agents'
// real doors (in the spirit of Matrix's Complement).
//
// # The harness
//
// [New] (in the test files, package federation_test) starts one alpd per
// BrokerSpec and waits until each is ready:
//
//	h := New(t, BrokerSpec{Name: "broker.a.example", Domains: []string{"a.example"}, Admins: []string{"ana"}},
//		BrokerSpec{Name: "broker.b.example", Domains: []string{"b.example"}, Users: []string{"lee"}})
//	a, b := h.Broker("broker.a.example"), h.Broker("broker.b.example")
//
// Every broker gets:
//
//   - its own loopback address (127.0.0.2, 127.0.0.3, … in spec order) and
//     a free port on it, where it serves HTTPS: a certificate for its broker
//     name, its domains and its IP from the harness's test CA (in memory,
//     written to a file for alpd: [Harness.CAFile]);
//   - http.public_url https://<broker name>:<port>, so its OAuth issuers,
//     sign-in redirects and federation URLs all use its real name;
//   - federation.resolve mapping every broker's name and every domain
//     (its own included) to that broker's ip:port, and federation.ca_file
//     the test CA: brokers reach each other by name and verify each other's
//     certificates as they would on the internet;
//   - the embedded NATS, listening on its IP (tests read its streams),
//     with broker.name (the NATS namespace) derived from the broker name
//     ("broker.a.example" → "broker_a_example");
//   - the test IdP for its domains, knowing Users and Admins (password
//     "<name>-pw"; admins hold alp.admin), so people sign in as
//     "<user>@<domain>";
//   - a data dir kept across [Broker.Stop], [Broker.Kill] and
//     [Broker.Start]: a restarted broker has its streams, keys and people.
//
// A BrokerSpec's Config func changes the alpd.yaml map last (a section
// more, a limit lowered, a setting broken on purpose).
//
// Talking to brokers: [Harness.Client] is an *http.Client that trusts the
// test CA and dials names through the resolve map. [Broker.SignIn],
// [Broker.PAT] and [Broker.CompanyAgent] do what a person and their agents
// do (test/internal/alpdtest, shared with test/e2e). Looking inside:
// [Broker.JetStream], [Broker.StreamMessages] (every raw message of one of
// the broker's streams, e.g. to check that no byte of a withheld field
// reached it), [Broker.KeyStore] (its sealed key file opened with its KEK,
// as alpd and alpctl keys open it). [Harness.Refused] starts an alpd that
// must refuse to start and returns what it said.
//
// The tests are skipped with -short. Run them with
//
//	GOTOOLCHAIN=local go test -count=1 ./test/federation/
package federation
