import Foundation
import Testing
import CampaignTestSupport

/// The test support's ``OwnThreadsExecutor``: the process-level suites rely
/// on it to wait without holding the cooperative pool's threads.
@Suite(.ownThreads) struct OwnThreadsTests {
    @Test func aTestUnderTheTraitRunsOnAThreadOfThePoolNotACooperativeOne() {
        #expect(OwnThreadsExecutor.isCurrent, "on \(Thread.current.name ?? "an unnamed thread")")
    }

    /// Three cases that each block until all three are blocking: more than
    /// the cooperative pool's threads on a 2-core machine, so on that pool
    /// they would wait out their bound instead. (Needs a parallelization
    /// width of 3 or more: Swift Testing's default is twice the cores.)
    static let arrived = DispatchSemaphore(value: 0)
    static let released = DispatchSemaphore(value: 0)

    /// Swift Testing's width as `make` sets it (unset: twice the cores, at least 4 here).
    static var width: Int {
        ProcessInfo.processInfo.environment["SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH"].flatMap(Int.init) ?? 2 * max(2, ProcessInfo.processInfo.activeProcessorCount)
    }

    @Test(.enabled(if: width >= 3, "a width under 3 (make sanitize's) never runs three cases at once"), arguments: 0..<3)
    func blockingCasesWaitSideBySide(_ n: Int) {
        Self.arrived.signal()
        if n == 0 {
            // The first case waits for the other two, then lets them go.
            var all = true
            for _ in 0..<3 where Self.arrived.wait(timeout: .now() + 30) != .success { all = false }
            #expect(all, "three blocking cases did not run at once")
            for _ in 0..<2 { Self.released.signal() }
        } else {
            #expect(Self.released.wait(timeout: .now() + 40) == .success)
        }
    }
}
