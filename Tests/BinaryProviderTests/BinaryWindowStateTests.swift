import Testing
import BinaryProvider

/// A binary connection's window (``BinaryWindowState``), event by event.
@Suite struct BinaryWindowStateTests {
    let second: UInt64 = 1_000_000_000

    @Test func aWindowTakesNotificationsUntilItsProofIsFramed() {
        var w = BinaryWindowState()
        #expect(w.takesMore)
        w.wroteAll(at: second)   // notifications written before any proof start no clock
        #expect(w == .filling)
        w.proofFramed()
        #expect(!w.takesMore)
        #expect(w.timer(at: 100 * second, stallSeconds: 5) == .none)   // not written yet: the gateway cannot answer it
    }

    @Test func theProofsAnswerIsLateOnlyAfterTheStallLimitFromItsWriting() {
        var w = BinaryWindowState()
        w.proofFramed()
        w.wroteAll(at: 10 * second)
        w.wroteAll(at: 12 * second)   // a later write does not move the proof's clock
        #expect(w == .proofWritten(at: 10 * second))
        #expect(w.timer(at: 15 * second, stallSeconds: 5) == .none)
        #expect(w.timer(at: 15 * second + 1, stallSeconds: 5) == .silent(seconds: 5))
        w.proofFramed()
        #expect(w == .proofWritten(at: 10 * second))
    }

    @Test func theNextConnectionsWindowStartsEmpty() {
        var w = BinaryWindowState()
        w.proofFramed()
        w.wroteAll(at: second)
        w.reset()
        #expect(w == .filling)
        #expect(w.timer(at: 100 * second, stallSeconds: 5) == .none)
    }
}
