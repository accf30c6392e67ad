#if canImport(Glibc)
import Glibc
#endif

/// CPU time as cumulative counters, whose differences say how busy the
/// CPUs were between two readings: this process's (getrusage), and the
/// machine's on the CPUs this process may run on (`/proc/stat`, the lines
/// of the CPUs in `Cpus_allowed_list`), so that work elsewhere on a shared
/// machine, or a `taskset`, counts as the CPU that is left.
public struct CPUTimes: Sendable, Equatable {
    /// Seconds of CPU this process has used (user and system).
    public var process: Double
    /// Summed over the CPUs this process may run on, in the kernel's ticks:
    /// busy (all but idle and waiting for I/O) and in all. Nil where
    /// `/proc/stat` cannot be read.
    public var machineBusy: Double?
    public var machineTotal: Double?
    /// The CPUs this process may run on.
    public var cores: Int
    /// When it was read: monotonic seconds (CPU time is real time whatever
    /// clock a caller's waits run on).
    public var at: Double

    public init(process: Double, machineBusy: Double?, machineTotal: Double?, cores: Int, at: Double) {
        (self.process, self.machineBusy, self.machineTotal, self.cores, self.at) = (process, machineBusy, machineTotal, max(1, cores), at)
    }

    /// The counters now.
    public static func now() -> CPUTimes {
        let cpus = allowedCPUs
        let machine = machineTicks(cpus: cpus)
        return CPUTimes(process: processSeconds(), machineBusy: machine?.busy, machineTotal: machine?.total,
                        cores: cpus?.count ?? Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))), at: Double(Deadline.now().nanoseconds) / 1e9)
    }

    /// How busy the CPUs were since `earlier`, each a share of the CPUs
    /// this process may run on (0…1): this process's own, and the machine's
    /// (this process included; nil without `/proc/stat`).
    public func share(since earlier: CPUTimes) -> (process: Double, machine: Double?) {
        let wallSeconds = at - earlier.at
        let process = wallSeconds > 0 ? min(1, max(0, (self.process - earlier.process) / (wallSeconds * Double(cores)))) : 0
        guard let busy = machineBusy, let total = machineTotal, let busy0 = earlier.machineBusy, let total0 = earlier.machineTotal,
              total > total0 else { return (process, nil) }
        return (process, min(1, max(0, (busy - busy0) / (total - total0))))
    }

    /// `seconds` of CPU since `earlier` as a share of the CPUs this process may run on.
    public func share(of seconds: Double, since earlier: CPUTimes) -> Double {
        let wallSeconds = at - earlier.at
        return wallSeconds > 0 ? min(1, max(0, seconds / (wallSeconds * Double(cores)))) : 0
    }

    /// Nanoseconds of CPU the calling thread has used.
    public static func thisThreadNanoseconds() -> UInt64 {
        var t = timespec()
        guard clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) == 0 else { return 0 }
        return UInt64(t.tv_sec) * 1_000_000_000 + UInt64(t.tv_nsec)
    }

    private static func processSeconds() -> Double {
        var usage = rusage()
        guard getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage) == 0 else { return 0 }
        func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }

    /// The CPUs this process may run on, read once (`Cpus_allowed_list: 0-3,8`).
    static let allowedCPUs: Set<Int>? = {
        guard let status = readProcFile("/proc/self/status") else { return nil }
        let text = String(decoding: status, as: UTF8.self)
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("Cpus_allowed_list:") }) else { return nil }
        return parseCPUList(line.dropFirst("Cpus_allowed_list:".count))
    }()

    /// `0-3,8` as {0, 1, 2, 3, 8}; nil when it is not such a list.
    static func parseCPUList(_ list: Substring) -> Set<Int>? {
        var cpus = Set<Int>()
        for part in list.split(separator: ",") {
            let bounds = part.trimmingSpaces.split(separator: "-")
            guard let low = bounds.first.flatMap({ Int($0) }), let high = (bounds.count == 2 ? Int(bounds[1]) : low),
                  bounds.count <= 2, low <= high, high - low < 1 << 16 else { return nil }
            cpus.formUnion(low...high)
        }
        return cpus.isEmpty ? nil : cpus
    }

    /// A file under /proc, read to its end (they report a size of 0); nil
    /// where there is none (not Linux).
    private static func readProcFile(_ path: String) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16_384)
        while bytes.count < 4 << 20 {
            guard let n = try? syscall("read", path: path, { chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) } }) else { return nil }
            if n == 0 { return bytes }
            bytes += chunk[0..<n]
        }
        return bytes
    }

    /// Busy and total ticks summed over `cpus` (every CPU when nil), from `/proc/stat`.
    private static func machineTicks(cpus: Set<Int>?) -> (busy: Double, total: Double)? {
        guard let stat = readProcFile("/proc/stat") else { return nil }
        return parseStat(String(decoding: stat, as: UTF8.self), cpus: cpus)
    }

    /// `/proc/stat`'s per-CPU lines (`cpuN user nice system idle iowait irq
    /// softirq steal …`): guest time is inside user time already, so the
    /// first eight fields are the total; idle and iowait are not busy.
    static func parseStat(_ text: String, cpus: Set<Int>?) -> (busy: Double, total: Double)? {
        var busy = 0.0, total = 0.0, seen = false
        for line in text.split(separator: "\n") where line.hasPrefix("cpu") {
            let fields = line.split(separator: " ")
            guard fields.count >= 5, let n = Int(fields[0].dropFirst(3)), cpus?.contains(n) ?? true else { continue }
            let ticks = fields.dropFirst().prefix(8).map { Double($0) ?? 0 }
            let all = ticks.reduce(0, +)
            total += all
            busy += all - ticks[3] - (ticks.count > 4 ? ticks[4] : 0)
            seen = true
        }
        return seen ? (busy, total) : nil
    }
}

extension Substring {
    fileprivate var trimmingSpaces: Substring {
        var s = self
        while s.first == " " || s.first == "\t" { s = s.dropFirst() }
        while s.last == " " || s.last == "\t" { s = s.dropLast() }
        return s
    }
}
