import Testing
@testable import CampaignIO

/// How busy the CPUs a process may run on were between two readings.
@Suite struct CPUTimesTests {
    @Test func theAllowedCPUListIsReadAsTheKernelWritesIt() {
        #expect(CPUTimes.parseCPUList("\t0-3,8") == [0, 1, 2, 3, 8])
        #expect(CPUTimes.parseCPUList(" 5") == [5])
        #expect(CPUTimes.parseCPUList("3-1") == nil)
        #expect(CPUTimes.parseCPUList("x") == nil)
    }

    /// The aggregate `cpu` line and the CPUs not allowed are left out; idle and iowait are not busy.
    @Test func onlyTheAllowedCPUsLinesCount() throws {
        let stat = """
            cpu  900 0 900 900 900 0 0 0 0 0
            cpu0 100 0 50 800 50 0 0 0 0 0
            cpu1 300 10 90 100 0 0 0 0 0 0
            cpu2 1 1 1 1 1 1 1 1 0 0
            intr 12345
            """
        let both = try #require(CPUTimes.parseStat(stat, cpus: [0, 1]))
        #expect(both.busy == 150 + 400 && both.total == 1000 + 500)
        let one = try #require(CPUTimes.parseStat(stat, cpus: [1]))
        #expect(one.busy == 400 && one.total == 500)
        #expect(CPUTimes.parseStat(stat, cpus: [7]) == nil)
    }

    @Test func sharesAreOfTheAllowedCPUsOverTheTimeBetweenReadings() {
        let earlier = CPUTimes(process: 10, machineBusy: 1000, machineTotal: 4000, cores: 2, at: 100)
        let later = CPUTimes(process: 10.5, machineBusy: 1150, machineTotal: 4200, cores: 2, at: 100.5)
        let share = later.share(since: earlier)
        #expect(share.process == 0.5 && share.machine == 0.75)
        // Without /proc/stat the machine's share is unknown.
        let blind = CPUTimes(process: 11, machineBusy: nil, machineTotal: nil, cores: 2, at: 101)
        #expect(blind.share(since: earlier).machine == nil)
    }

    @Test func aBusyLoopShowsInThisProcesssShare() {
        let before = CPUTimes.now()
        var x: UInt64 = 1
        let until = Deadline.after(seconds: 0.2)
        while Deadline.now() < until { x = x &* 6364136223846793005 &+ 1 }
        let share = CPUTimes.now().share(since: before)
        #expect(x != 0)
        #expect(share.process > 0.1 / Double(before.cores), "a spinning thread uses about one CPU of \(before.cores): \(share)")
        #expect(share.machine.map { $0 >= share.process * 0.5 } ?? true)
    }
}
