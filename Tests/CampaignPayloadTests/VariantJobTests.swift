import Testing
import CampaignIO
import CampaignJSON
@testable import CampaignPayload
import CampaignRules

/// A job's `variants`: the rules each is held to, and the one function that
/// puts a device in a variant (a change to it moves devices between
/// variants of a running test, so the vector below must fail first).
@Suite struct VariantJobTests {
    static let ab = #"""
    {"campaign":"spring-ab","fallback":["en"],"variants":[
      {"name":"A","weight":45,"messages":{"en":{"alert":"Hi {first_name}"},"es":{"alert":"Hola {first_name}"}}},
      {"name":"B","weight":45,"messages":{"en":{"alert":"Picks for {first_name}"},"es":{"alert":"Novedades"}}},
      {"name":"control","weight":10,"holdout":true}]}
    """#

    static func parse(_ text: String) throws(JobError) -> CampaignJob {
        let value: JSONValue
        do { value = try JSONValue.parse(Array(text.utf8)) } catch { throw JobError(path: "job.json", reason: .notAnObject) }
        return try CampaignJob(json: value, path: "job.json")
    }

    /// The sentence a job is refused with, nil when it is not refused.
    static func refusal(_ text: String) -> String? {
        do { _ = try parse(text); return nil } catch { return error.description }
    }

    @Test func aJobWithVariantsHasEveryVariantsMessagesInJobOrder() throws {
        let job = try Self.parse(Self.ab)
        #expect(job.variants.map(\.name) == ["A", "B", "control"])
        #expect(job.variants.map(\.weight) == [45, 45, 10])
        #expect(job.variants.map(\.holdout) == [false, false, true])
        #expect(job.messages.map(\.tag) == ["en", "es", "en", "es"])
        #expect(job.variants.map(\.messages) == [0..<2, 2..<4, 4..<4])
        let b = job.selector(ofVariant: 1)
        #expect(b.select(LanguageTag("fr")) == 0 && b.select(LanguageTag("es-MX")) == 1, "each variant falls back within its own messages")
        // Every variant's variables are the job's: a mapping may name B's alone.
        let mapped = try Self.parse(Self.ab.replacingOccurrences(of: #""fallback""#, with: #""columns":{"first_name":"given"},"fallback""#))
        #expect(mapped.columns.sources["first_name"] == "given")
    }

    @Test(arguments: [
        (#"{"campaign":"c","messages":{"en":{"alert":"x"}},"variants":[{"name":"A","weight":1,"messages":{"en":{"alert":"a"}}},{"name":"B","weight":1,"holdout":true}]}"#,
         "\"messages\" goes inside each of \"variants\": a job with variants has no messages of its own"),
        (#"{"campaign":"c","variants":[{"name":"A","weight":1,"messages":{"en":{"alert":"a"}}}]}"#,
         "\"variants\" must be an array of at least two variants"),
        (#"{"campaign":"c","variants":[{"name":"A","weight":1,"messages":{"en":{"alert":"a"}}},{"name":"A","weight":2,"messages":{"en":{"alert":"b"}}}]}"#,
         "variants[1].name \"A\" names another variant too: names must be unique"),
        (#"{"campaign":"c","variants":[{"name":"A","weight":0,"messages":{"en":{"alert":"a"}}},{"name":"B","weight":1,"holdout":true}]}"#,
         "variants[0].weight must be a whole number from 1 to 1000000"),
        (#"{"campaign":"c","variants":[{"name":"A","weight":1.5,"messages":{"en":{"alert":"a"}}},{"name":"B","weight":1,"holdout":true}]}"#,
         "variants[0].weight must be a whole number"),
        (#"{"campaign":"c","variants":[{"name":"A","weight":1,"messages":{"en":{"alert":"a"}}},{"name":"B","weight":1,"holdout":true,"messages":{"en":{"alert":"b"}}}]}"#,
         "variants[1] is a holdout: it gets nothing, so it has no \"messages\""),
        (#"{"campaign":"c","variants":[{"name":"A","weight":1},{"name":"B","weight":1,"holdout":true}]}"#,
         "variants[0].messages is missing (or give the variant \"holdout\": true)"),
        (#"{"campaign":"c","variants":[{"name":"A","weight":1,"holdout":true},{"name":"B","weight":1,"holdout":true}]}"#,
         "\"variants\" must have at least one variant with messages (every one is a holdout)"),
        (#"{"campaign":"c","variants":[{"name":"A B","weight":1,"messages":{"en":{"alert":"a"}}},{"name":"B","weight":1,"holdout":true}]}"#,
         "variants[0].name must be 1 to 64 letters, digits, '.', '_' or '-'"),
        (#"{"campaign":"c","variants":[{"name":"A","weight":1,"messages":{"en":{"alert":"a"}},"color":"red"},{"name":"B","weight":1,"holdout":true}]}"#,
         "variants[0]: unknown key \"color\" (known: holdout, messages, name, weight)"),
        // A rule of the job's own fields is the job's, not its first variant's:
        (#"{"campaign":"c","format":"enhanced","topic":"com.example.app","variants":[{"name":"A","weight":1,"messages":{"en":{"alert":"a"}}},{"name":"B","weight":1,"holdout":true}]}"#,
         "\"topic\" is for the HTTP/2 provider API: it goes with \"format\": \"h2\""),
        (#"{"campaign":"c","priority":7,"variants":[{"name":"A","weight":1,"messages":{"en":{"alert":"a"}}},{"name":"B","weight":1,"holdout":true}]}"#,
         "\"priority\" must be 10 (immediate) or 5 (conserve power)"),
        // The job's other rules, each variant's messages held to them:
        (#"{"campaign":"c","fallback":["en"],"variants":[{"name":"A","weight":1,"messages":{"en":{"alert":"a"}}},{"name":"B","weight":1,"messages":{"es":{"alert":"b"}}}]}"#,
         "variants[1] (\"B\"): fallback \"en\" has no message in \"messages\""),
        (#"{"campaign":"c","variants":[{"name":"A","weight":1,"messages":{" ":{"alert":"a"}}},{"name":"B","weight":1,"holdout":true}]}"#,
         "variants[0] (\"A\"): messages: \" \" is not a language tag"),
        (#"{"campaign":"c","variants":[{"name":"A","weight":1,"messages":{"en":{"alert":"{name"}}},{"name":"B","weight":1,"holdout":true}]}"#,
         "variants[0] (\"A\"): messages.en.alert:"),
        (#"{"campaign":"c","format":"h2","topic":"com.example.app","pushType":"liveactivity","variants":[{"name":"A","weight":1,"messages":{"en":{"alert":"a"}}},{"name":"B","weight":1,"holdout":true}]}"#,
         "variants[0] (\"A\"): messages.en: a Live Activity (pushType liveactivity) needs \"timestamp\""),
        (#"{"campaign":"c","format":"h2","topic":"com.example.app","pushType":"liveactivity","broadcast":true,"variants":[{"name":"A","weight":1,"messages":{"en":{"alert":"a"}}},{"name":"B","weight":1,"holdout":true}]}"#,
         "\"variants\" cannot go with \"broadcast\""),
    ])
    func aJobsVariantsAreRefusedWithASentenceNamingTheKey(job: String, sentence: String) {
        let refusal = Self.refusal(job)
        #expect(refusal?.hasPrefix("job.json: " + sentence) == true, "\(refusal ?? "accepted")")
    }

    /// 20 fixed tokens and their variants for campaign "spring-ab", weights
    /// A 45, B 45, control 10: FNV-1a-64 over "spring-ab", 0x00 and the
    /// token's bytes, its high 64 bits of (hash × 100) against 45, 90, 100.
    @Test func aDevicesVariantIsAFixedFunctionOfTheCampaignAndToken() throws {
        let job = try Self.parse(Self.ab)
        let assigner = try #require(job.variantAssigner)
        let names = (0..<20).map { i -> String in
            let token = (0..<32).map { j in UInt8(truncatingIfNeeded: i &* 37 &+ j &* 11) }
            return job.variants[assigner.variant(of: token)].name
        }
        #expect(names.joined(separator: " ") == Self.vector)
        // Another campaign's split is another one.
        let other = VariantAssigner(campaign: "autumn", weights: [45, 45, 10])
        let otherNames = (0..<20).map { i in job.variants[other.variant(of: (0..<32).map { j in UInt8(truncatingIfNeeded: i &* 37 &+ j &* 11) })].name }
        #expect(otherNames != names)
    }

    // Computed independently (Python) from the definition above.
    static let vector = "A B B B A B B A B control B B B A B B A A B B"

    @Test func hundredThousandDevicesSplitWithinOnePercentOfTheWeights() {
        let assigner = VariantAssigner(campaign: "spring-ab", weights: [45, 45, 10])
        var counts = [0, 0, 0]
        var rng = SplitMix64(seed: 35)
        var token = [UInt8](repeating: 0, count: 32)
        for _ in 0..<100_000 {
            for k in 0..<4 {
                let v = rng.next()
                for b in 0..<8 { token[k * 8 + b] = UInt8(truncatingIfNeeded: v >> (8 * UInt64(b))) }
            }
            counts[assigner.variant(of: token)] += 1
        }
        for (n, share) in zip(counts, [0.45, 0.45, 0.10]) {
            #expect(abs(Double(n) / 100_000 - share) < 0.01, "\(counts)")
        }
        // Sequential tokens (an export sorted by token) split as well.
        counts = [0, 0, 0]
        for i in 0..<100_000 {
            for b in 0..<8 { token[24 + b] = UInt8(truncatingIfNeeded: i >> (8 * b)) }
            counts[assigner.variant(of: token)] += 1
        }
        for (n, share) in zip(counts, [0.45, 0.45, 0.10]) {
            #expect(abs(Double(n) / 100_000 - share) < 0.01, "sequential: \(counts)")
        }
    }
}
