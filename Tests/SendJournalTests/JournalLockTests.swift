import Foundation
import Testing
import CampaignTestSupport
@testable import SendJournal

/// The journal's lock: a look at it from elsewhere (a sibling part's rate,
/// `status`) holds it shared for an instant, which must not make a send or a
/// resume believe another send holds the journal; a running send does.
@Suite(.ownThreads) struct JournalLockTests {
    @Test func aLookThatHoldsTheLockForAnInstantDoesNotRefuseIt() throws {
        let dir = TemporaryDirectory("journal-lock")
        let path = dir.file("lock")
        let taker = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600), looker = open(path, O_RDONLY | O_CLOEXEC)
        defer { close(taker); close(looker) }
        #expect(flock(looker, LOCK_SH | LOCK_NB) == 0)
        // The look ends 20 ms later, on its own thread.
        let released = Thread { usleep(20_000); flock(looker, LOCK_UN) }
        released.start()
        #expect(Journal.lock(taker), "taken once the look is over")
        #expect(flock(looker, LOCK_SH | LOCK_NB) != 0, "held")
    }

    @Test func aLockHeldForGoodIsRefusedWithinAFractionOfASecond() throws {
        let dir = TemporaryDirectory("journal-lock-held")
        let path = dir.file("lock")
        let holder = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600), taker = open(path, O_RDWR | O_CLOEXEC)
        defer { close(holder); close(taker) }
        #expect(flock(holder, LOCK_EX | LOCK_NB) == 0)
        let asked = Date()
        #expect(!Journal.lock(taker))
        #expect(Date().timeIntervalSince(asked) < 5, "a bounded retry, not a wait")
    }
}
