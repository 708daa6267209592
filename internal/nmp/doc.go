// Package nmp implements the rules of NMP, the NeuroMessage Protocol, as the
// broker applies them to the NMP header (alp.nmp.v1.NmpHeader) that travels
// beside each envelope.
//
// NMP adds four things to a message: a trust level that may only fall as the
// message travels, six advisory signals (urgency, quality, inhibition,
// activation, focus, reward), a token budget whose limit may only fall and
// whose running total may only grow, and a trace of the hops. This package
// holds the pure rules over those values:
//
//   - fixed-point signal values (Milli) parsed from decimal text without
//     floating point, and their ranges;
//   - trust lowering (Lower), budget lowering and the 95 % halt rule;
//   - the three signal conflict rules of the NMP README (Detect);
//   - the Yerkes-Dodson curve and system mode selection (SelectMode);
//   - the parser for headers an agent supplies in an NLIP submessage
//     (ParseAgentHeader) and the merge that takes from them only what can
//     lower trust or budget (Apply);
//   - the README's JSON rendering of a header (ToJSON).
//
// Nothing here touches an envelope or keeps state: package envelope records
// hops and sets trust at the trust-setting points, and callers hand the
// header to these functions. Every knob has a default returned by a function
// (DefaultConfig and friends), so there is no package-level mutable state.
// docs/nmp.md says where the sources are silent and what was chosen.
package nmp
