import Testing
import H2Provider

/// An open HTTP/2 connection's phase and PING (``H2ConnectionMachine``), event by event.
@Suite struct H2ConnectionMachineTests {
    let second: UInt64 = 1_000_000_000

    @Test func untilTheServersSettingsAtMostAHundredStreamsAndNoMeasuringPing() {
        var m = H2ConnectionMachine()
        #expect(m.streamLimit(server: 1000, wanted: 500) == 100)
        #expect(m.mayStartStreams(at: 0))
        #expect(m.timers(at: 5 * second, requestsOpen: false, lastReadAt: nil, pingAfterSeconds: 60) == .none)
        m.settingsArrived()
        #expect(m.streamLimit(server: 1000, wanted: 500) == 500)
        #expect(m.streamLimit(server: 50, wanted: 500) == 50)
        #expect(m.timers(at: 5 * second, requestsOpen: false, lastReadAt: nil, pingAfterSeconds: 60) == .sendPing)
    }

    @Test func aRetryAfterHoldsNewStreamsUntilItEndsAndALaterShorterOneDoesNotShortenIt() {
        var m = H2ConnectionMachine()
        m.settingsArrived()
        m.pause(until: 10 * second)
        m.pause(until: 4 * second)
        #expect(!m.mayStartStreams(at: 9 * second))
        #expect(m.pauseEnds(after: 9 * second) == 10 * second)
        #expect(m.mayStartStreams(at: 10 * second))
        #expect(m.pauseEnds(after: 10 * second) == nil)
    }

    @Test func aPauseBeforeTheSettingsIsKeptWhenTheyArrive() {
        var m = H2ConnectionMachine()
        m.pause(until: 3 * second)
        m.settingsArrived()
        #expect(m.phase == .open(pausedUntil: 3 * second))
        #expect(!m.mayStartStreams(at: 2 * second))
    }

    @Test func goingAwayStartsNoStreamAndIsFinal() {
        var m = H2ConnectionMachine()
        m.settingsArrived()
        m.goAway()
        #expect(m.isGoingAway)
        #expect(!m.mayStartStreams(at: 100 * second))
        m.settingsArrived()
        m.pause(until: 1)
        #expect(m.phase == .goingAway)
        #expect(m.pauseEnds(after: 0) == nil)
    }

    @Test func aPingMeasuresTheRoundTripOnceASecond() {
        var m = H2ConnectionMachine()
        m.settingsArrived()
        #expect(m.timers(at: 2 * second, requestsOpen: false, lastReadAt: nil, pingAfterSeconds: 60) == .sendPing)
        #expect(m.pingInFlight)
        #expect(m.timers(at: 2 * second + 1, requestsOpen: false, lastReadAt: nil, pingAfterSeconds: 60) == .none)
        #expect(m.pingAcknowledged(at: 2 * second + 40_000_000) == 40_000_000)
        #expect(m.pingAcknowledged(at: 2 * second + 50_000_000) == nil)
        #expect(m.timers(at: 2 * second + 900_000_000, requestsOpen: false, lastReadAt: nil, pingAfterSeconds: 60) == .none)
        #expect(m.timers(at: 3 * second, requestsOpen: false, lastReadAt: nil, pingAfterSeconds: 60) == .sendPing)
    }

    @Test func anUnansweredPingWithNothingReadSinceIsSilenceButAnythingReadIsNot() {
        var m = H2ConnectionMachine()
        m.settingsArrived()
        #expect(m.timers(at: second, requestsOpen: true, lastReadAt: second, pingAfterSeconds: 30) == .sendPing)
        // The PING that measured the round trip is unanswered, but silence is
        // 30 s without reading and a third of it (10 s at most) more.
        #expect(m.timers(at: 12 * second, requestsOpen: true, lastReadAt: second, pingAfterSeconds: 30) == .none)
        #expect(m.timers(at: 41 * second, requestsOpen: true, lastReadAt: second, pingAfterSeconds: 30) == .none)
        #expect(m.timers(at: 41 * second + 1, requestsOpen: true, lastReadAt: second, pingAfterSeconds: 30) == .silent(seconds: 10))
        // With a short --ping-after, the same: 0.6 s quiet and 0.2 s more.
        var quick = H2ConnectionMachine()
        quick.settingsArrived()
        #expect(quick.timers(at: second, requestsOpen: true, lastReadAt: second, pingAfterSeconds: 0.6) == .sendPing)
        #expect(quick.timers(at: second + 700_000_000, requestsOpen: true, lastReadAt: second, pingAfterSeconds: 0.6) == .none)
        #expect(quick.timers(at: second + 810_000_000, requestsOpen: true, lastReadAt: second, pingAfterSeconds: 0.6) == .silent(seconds: 0.6 / 3))
        // The same, but the server sent something after the PING: slow, not dead; a new PING measures again.
        var slow = H2ConnectionMachine()
        slow.settingsArrived()
        _ = slow.timers(at: second, requestsOpen: true, lastReadAt: second, pingAfterSeconds: 30)
        #expect(slow.timers(at: 12 * second, requestsOpen: true, lastReadAt: 5 * second, pingAfterSeconds: 30) == .none)
        #expect(!slow.pingInFlight)
        #expect(slow.timers(at: 12 * second + 1, requestsOpen: true, lastReadAt: 5 * second, pingAfterSeconds: 30) == .sendPing)
        // Nothing open: an unanswered PING is nobody's silence.
        var idle = H2ConnectionMachine()
        idle.settingsArrived()
        _ = idle.timers(at: second, requestsOpen: false, lastReadAt: nil, pingAfterSeconds: 30)
        #expect(idle.timers(at: 60 * second, requestsOpen: false, lastReadAt: nil, pingAfterSeconds: 30) == .none)
    }

    @Test func beforeTheSettingsAQuietConnectionWithRequestsOpenIsPinged() {
        var m = H2ConnectionMachine()
        #expect(m.timers(at: 20 * second, requestsOpen: true, lastReadAt: 0, pingAfterSeconds: 30) == .none)
        #expect(m.timers(at: 31 * second, requestsOpen: true, lastReadAt: 0, pingAfterSeconds: 30) == .sendPing)
    }
}
