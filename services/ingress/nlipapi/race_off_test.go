//go:build !race

package nlipapi_test

// raceDetector: built with -race.
const raceDetector = false
