// Package spec holds the ALP specification as alpd implements it: alp.md,
// the message types (spec/types) and the conformance vectors
// (spec/vectors). Its test keeps the text honest against the code: links
// resolve, every refusal code the federation receiver can answer is
// documented, and every type and vector file is mentioned.
package spec
