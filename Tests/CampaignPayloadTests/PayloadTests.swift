import Testing
import APNSWire
import AudienceIngest
import CampaignJSON
@testable import CampaignPayload

func job(_ text: String) throws -> CampaignJob {
    try CampaignJob(json: JSONValue.parse(text), path: "job.json")
}

/// The job's refusal in words (nil: accepted).
func jobError(_ text: String) -> String? {
    do { _ = try job(text); return nil } catch let error as JobError { return error.reason.sentence } catch { return "\(error)" }
}

/// Why the job is refused (nil: accepted, or refused by something else than a JobError).
func jobRefusal(_ text: String) -> JobError.Reason? {
    do { _ = try job(text); return nil } catch let error as JobError { return error.reason } catch { return nil }
}

/// Renders message 0 (or the one for `lang`) with `values`.
func render(_ renderer: PayloadRenderer, _ values: [String: String], message: Int = 0, max: Int? = nil) -> (String, RenderOutcome) {
    let names = Array(values.keys)
    let row = AudienceRow(line: 2, values: names.map { values[$0] })
    let columns = renderer.variables.map { names.firstIndex(of: $0) ?? -1 }
    var out: [UInt8] = []
    let outcome = renderer.render(message: message, row: row, columns: columns, maxBytes: max ?? renderer.job.maxPayload, into: &out)
    return (String(decoding: out, as: UTF8.self), outcome)
}

@Suite struct JobFileTests {
    static let issueExample = """
    {
      "campaign": "spring-sale",
      "format": "enhanced",
      "maxPayload": 256,
      "expiresIn": 86400,
      "priority": 10,
      "fallback": ["en"],
      "messages": {
        "en": { "alert": "Hi {first_name}, {discount}% off until Sunday", "sound": "default", "badge": "{badge}" },
        "es": { "alert": "¡Hola {first_name}! {discount}% de descuento hasta el domingo" },
        "pt-BR": { "alert": "Olá {first_name}, {discount}% de desconto até domingo" }
      },
      "custom": { "campaign": "spring" }
    }
    """

    @Test func theIssueExampleLoads() throws {
        let j = try job(Self.issueExample)
        #expect(j.campaign == "spring-sale")
        #expect(j.wire == .binary(.enhanced) && j.maxPayload == 256 && j.expiresIn == 86_400)
        #expect(j.messages.map(\.tag) == ["en", "es", "pt-BR"])
        #expect(j.fallback == ["en"])
    }

    @Test(arguments: [
        (#"{"campaign":"x","messages":{"en":{"alert":"a"}},"throttle":{"perMinute":30}}"#, "throttle.perMinute must be a whole number of notifications per minute, from 60 to 600,000,000"),
        (#"{"campaign":"x","messages":{"en":{"alert":"a"}},"throttle":{"perSecond":30}}"#, "throttle: unknown key \"perSecond\" (known: perMinute)"),
        (#"{"campaign":"x","messages":{"en":{"alert":"a"}},"fallbak":["en"]}"#, "unknown key \"fallbak\" (known: broadcast, campaign, collapseId, columns, custom, deliverAt, expiresIn, fallback, format, frequencyCap, maxPayload, messages, priority, pushType, quietHours, samples, throttle, topic, variants)"),
        (#"{"campaign":"x","format":"fast","messages":{"en":{"alert":"a"}}}"#, "\"format\" must be \"simple\", \"enhanced\", \"frame\" or \"h2\", not \"fast\""),
        (#"{"campaign":"x","topic":"com.a","messages":{"en":{"alert":"a"}}}"#, "\"topic\" is for the HTTP/2 provider API: it goes with \"format\": \"h2\""),
        (#"{"campaign":"x","format":"h2","pushType":"fax","messages":{"en":{"alert":"a"}}}"#, "\"pushType\" must be one of alert, background, voip, location, complication, fileprovider, mdm, liveactivity, pushtotalk, controls, widgets, not \"fax\""),
        (#"{"campaign":"x","format":"h2","collapseId":"\#(String(repeating: "c", count: 65))","messages":{"en":{"alert":"a"}}}"#, "\"collapseId\" must be 1 to 64 bytes (APNs refuses longer ones)"),
        (#"{"campaign":"x","format":"h2","pushType":"background","priority":10,"messages":{"en":{"alert":"a"}}}"#, "\"priority\" 10 is refused by APNs for background pushes: use 5 or 1"),
        (#"{"campaign":"x","format":"enhanced","priority":1,"messages":{"en":{"alert":"a"}}}"#, "\"priority\" must be 10 (immediate) or 5 (conserve power)"),
        (#"{"campaign":"x","format":"h2","maxPayload":4097,"messages":{"en":{"alert":"a"}}}"#, "\"maxPayload\" must be a whole number from 1 to 4096"),
        (#"{"campaign":"x","maxPayload":2048,"messages":{"en":{"alert":"a"}}}"#, "\"maxPayload\" must be a whole number from 1 to 256"),
        (#"{"campaign":"x","fallback":["de"],"messages":{"en":{"alert":"a"}}}"#, "fallback \"de\" has no message in \"messages\""),
        (#"{"campaign":"x","messages":{"en":{"alert":"Hi {name"}}}"#, "messages.en.alert: '{' at character 4 is never closed (write {{ for a literal brace)"),
        (#"{"campaign":"x","messages":{"en":{"badge":"many"}}}"#, "messages.en.badge must be a whole number or exactly one \"{variable}\""),
        (#"{"campaign":"../x","messages":{"en":{"alert":"a"}}}"#, "\"campaign\" must be a name of letters, digits, '.', '_' and '-' (it names output directories)"),
        (#"{"campaign":"x","messages":{"en":{"alert":"a"},"EN":{"alert":"b"}}}"#, "messages: \"EN\" names the same language as another message"),
        (#"{"campaign":"x","priority":7,"messages":{"en":{"alert":"a"}}}"#, "\"priority\" must be 10 (immediate) or 5 (conserve power)"),
        (#"{"campaign":"x","format":"frame","messages":{"en":{"content-available":1}}}"#, "messages.en: priority 10 needs an alert, sound or badge; a content-available-only push must use priority 5"),
    ])
    func badJobsSayWhatIsWrong(text: String, reason: String) {
        #expect(jobError(text) == reason)
    }

    @Test func invalidJSONNamesTheLine() throws {
        let dir = "/tmp/campaign-job-\(UInt32.random(in: 0...UInt32.max)).json"
        try! "{\n\"campaign\": \"x\",\n\"messages\": {,}\n}".write(toFile: dir)
        #expect { try CampaignJob.load(path: dir) } throws: {
            guard let e = $0 as? JobError, case .invalidJSON(line: 3, _) = e.reason else { return false }
            return e.description.hasPrefix("\(dir): line 3: invalid JSON:")
        }
    }
}

extension String {
    func write(toFile path: String) throws {
        let f = fopen(path, "w")!
        fputs(self, f)
        fclose(f)
    }
}
#if canImport(Glibc)
import Glibc
#endif

@Suite struct LanguageSelectionTests {
    static let selector = MessageSelector(
        tags: ["en", "es", "pt-BR", "zh-Hans", "zh-Hant", "fr-CA"].map { LanguageTag($0)! },
        fallback: ["es", "en"].map { LanguageTag($0)! })

    @Test(arguments: [
        ("pt-BR", "pt-BR"), ("PT_br", "pt-BR"),           // exact, any case, _ or -
        ("pt-PT", "pt-BR"), ("pt", "pt-BR"),              // another message of the same language
        ("zh-Hant-TW", "zh-Hant"), ("zh-TW", "zh-Hant"),  // language and script; script implied by region
        ("zh-CN", "zh-Hans"), ("zh_HK.UTF-8", "zh-Hant"),
        ("es_MX.UTF-8", "es"), ("es-419", "es"),          // POSIX; a numeric region
        ("fr-FR", "fr-CA"),
        ("de-DE", "es"), ("", "es"), ("  ", "es"),        // the fallback chain
    ])
    func selectsTheRightMessage(device: String, expected: String) {
        let index = Self.selector.select(LanguageTag(device))
        #expect(index.map { Self.selector.tags[$0] } == LanguageTag(expected))
    }

    static let british = MessageSelector(
        tags: ["en", "en-GB", "he", "id", "yi", "zh-TW", "zh-CN"].map { LanguageTag($0)! },
        fallback: ["en"].map { LanguageTag($0)! })

    @Test(arguments: [
        ("en-GB-oxendict", "en-GB"), ("en-Latn-GB", "en-GB"),   // RFC 4647 lookup; language and region
        ("en-GB-x-private", "en-GB"), ("en-US", "en"),
        ("iw", "he"), ("iw-IL", "he"), ("in", "id"), ("ji", "yi"), // withdrawn ISO 639 codes
        ("zh-Hant-TW", "zh-TW"), ("zh-Hans-TW", "zh-CN"),     // a region's tag only when the scripts agree
    ])
    func lookupDropsSubtagsAndMapsWithdrawnCodes(device: String, expected: String) {
        let index = Self.british.select(LanguageTag(device))
        #expect(index.map { Self.british.tags[$0] } == LanguageTag(expected), "\(device)")
    }

    @Test func lookupChainDropsFromTheEnd() {
        #expect(LanguageTag("en-GB-oxendict")?.lookupChain == ["en-gb-oxendict", "en-gb", "en"])
        #expect(LanguageTag("de-CH-x-phonebk")?.lookupChain == ["de-ch-x-phonebk", "de-ch", "de"])
        #expect(LanguageTag("iw_IL")?.normalized == "he-il")
    }

    @Test func noMessageAndNoFallbackIsNil() {
        let selector = MessageSelector(tags: [LanguageTag("en")!], fallback: [])
        #expect(selector.select(LanguageTag("de")) == nil)
        #expect(selector.select(nil) == nil)
    }
}

@Suite struct RenderingTests {
    @Test func compactDeterministicUTF8() throws {
        let renderer = PayloadRenderer(job: try job(JobFileTests.issueExample))
        let (text, outcome) = render(renderer, ["first_name": "Zoë", "discount": "20", "badge": "007"])
        #expect(outcome == .fitted)
        #expect(text == #"{"aps":{"alert":"Hi Zoë, 20% off until Sunday","sound":"default","badge":7},"campaign":"spring"}"#)
        let (es, _) = render(renderer, ["first_name": "Ana", "discount": "15"], message: 1)
        #expect(es == #"{"aps":{"alert":"¡Hola Ana! 15% de descuento hasta el domingo"},"campaign":"spring"}"#)
    }

    @Test func valuesAreEscaped() throws {
        let renderer = PayloadRenderer(job: try job(#"{"campaign":"x","messages":{"en":{"alert":"Hi {n}"}}}"#))
        let (text, _) = render(renderer, ["n": "\"Bob\" \\ \n\t\u{01}"])
        #expect(text == #"{"aps":{"alert":"Hi \"Bob\" \\ \n\t\u0001"}}"#)
        #expect(PayloadInspector.problem(in: Array(text.utf8)) == nil)
    }

    @Test func missingVariablesAndBadBadgesAreReported() throws {
        let renderer = PayloadRenderer(job: try job(JobFileTests.issueExample))
        #expect(render(renderer, ["first_name": "Ana", "badge": "1"]).1 == .missingVariable("discount"))
        #expect(render(renderer, ["first_name": "Ana", "discount": "1", "badge": "2.5"]).1 == .invalidBadge("2.5"))
        #expect(render(renderer, ["first_name": "Ana", "discount": "1", "badge": "-1"]).1 == .invalidBadge("-1"))
    }

    @Test func alertDictionaryLocArgsContentAvailableAndCustomTemplates() throws {
        let renderer = PayloadRenderer(job: try job("""
        {"campaign":"x","format":"frame","maxPayload":2048,"messages":{"en":{
          "alert":{"loc-key":"GREETING","loc-args":["{first_name}","{city}"],"action-loc-key":null,"launch-image":"a.png"},
          "content-available":1,"badge":3}},
         "custom":{"ref":"{ref}","n":[1,{"k":"{city}"}],"flag":true}}
        """))
        let (text, outcome) = render(renderer, ["first_name": "Ana", "city": "Lima", "ref": "r-1"])
        #expect(outcome == .fitted)
        #expect(text == #"{"aps":{"alert":{"loc-key":"GREETING","loc-args":["Ana","Lima"],"action-loc-key":null,"launch-image":"a.png"},"content-available":1,"badge":3},"ref":"r-1","n":[1,{"k":"Lima"}],"flag":true}"#)
    }
}

@Suite struct FittingTests {
    static let renderer = PayloadRenderer(job: try! job(#"{"campaign":"x","messages":{"en":{"alert":"{text}"}}}"#))
    /// `{"aps":{"alert":""}}` is 20 bytes.
    static let overhead = 20

    static func fit(_ text: String, max: Int = 256) -> (String, RenderOutcome, String) {
        let (payload, outcome) = render(renderer, ["text": text], max: max)
        let alert = (try? JSONValue.parse(payload))?["aps"]?["alert"]?.stringValue ?? "<invalid>"
        return (payload, outcome, alert)
    }

    @Test(arguments: [255, 256])
    func payloadsAtOrUnderTheLimitAreUntouched(size: Int) {
        let text = String(repeating: "a", count: size - Self.overhead)
        let (payload, outcome, alert) = Self.fit(text)
        #expect(outcome == .fitted)
        #expect(payload.utf8.count == size)
        #expect(alert == text)
    }

    @Test func oneByteOverIsShortenedToTheLongestTextThatFits() {
        let text = String(repeating: "a", count: 257 - Self.overhead)
        let (payload, outcome, alert) = Self.fit(text)
        #expect(payload.utf8.count == 256)
        #expect(alert == String(repeating: "a", count: 256 - Self.overhead - 3) + "…")
        #expect(outcome == .truncated(droppedBytes: 4))
    }

    @Test func cutsAtAWordEndWhenThatCostsAtMost8Bytes() {
        // Budget for the text: 30 - 20 - 3 = 7 bytes.
        #expect(Self.fit("Hello wonderful world", max: 30).2 == "Hello…")       // drops "w" (1 byte) to end on a word
        #expect(Self.fit("Supercalifragilistic", max: 30).2 == "Superca…")      // no word end: cut inside
        #expect(Self.fit("Hi abcdefghijklmnop", max: 34).2 == "Hi…")            // gives up "abcdefgh": 8 bytes, allowed
        #expect(Self.fit("Hi abcdefghijklmnop", max: 35).2 == "Hi abcdefghi…")  // 9 bytes would be too many
    }

    @Test(arguments: [
        "👍🏽👍🏽👍🏽👍🏽👍🏽👍🏽👍🏽👍🏽👍🏽👍🏽",                       // emoji with skin-tone modifiers
        "🇪🇸🇲🇽🇧🇷🇵🇹🇫🇷🇩🇪🇯🇵🇰🇷🇨🇳🇺🇸",                                 // flags: pairs of regional indicators
        "e\u{301}e\u{301}e\u{301}e\u{301}e\u{301}e\u{301}e\u{301}e\u{301}",  // combining accents
        "👨‍👩‍👧‍👦👨‍👩‍👧‍👦👨‍👩‍👧‍👦👨‍👩‍👧‍👦",                       // ZWJ families
    ])
    func neverSplitsAGraphemeCluster(text: String) throws {
        for max in stride(from: 24, through: 60, by: 1) {
            let (payload, outcome, alert) = Self.fit(text, max: max)
            #expect(payload.utf8.count <= max)
            if case .truncated = outcome {
                let kept = String(alert.dropLast())   // drop the "…"
                #expect(text.hasPrefix(kept), "max \(max)")
                #expect(kept.isEmpty || text[text.index(text.startIndex, offsetBy: kept.count - 1)] == kept.last!)
                #expect(Array(text).starts(with: Array(kept)), "cut inside a grapheme at max \(max)")
            }
        }
    }

    @Test func escapedBytesAreWhatCounts() {
        // Each quote costs 2 bytes once escaped.
        let text = String(repeating: "\"", count: 300)
        let (payload, _, alert) = Self.fit(text)
        #expect(payload.utf8.count <= 256)
        #expect(alert == String(repeating: "\"", count: (256 - Self.overhead - 3) / 2) + "…")
    }

    @Test func aPayloadThatCannotFitEvenEmptyIsRefused() throws {
        let renderer = PayloadRenderer(job: try job(#"{"campaign":"x","messages":{"en":{"alert":"{t}","sound":"{s}"}}}"#))
        let (_, outcome) = render(renderer, ["t": "hello", "s": String(repeating: "s", count: 300)])
        #expect(outcome == .cannotFit(minimumBytes: 331))   // 17 + 11 + 300 + 3, with an empty alert
    }

    @Test func theLastLocArgGivesWayWhenThereIsNoBody() throws {
        let renderer = PayloadRenderer(job: try job(#"{"campaign":"x","messages":{"en":{"alert":{"loc-key":"K","loc-args":["{a}","{b}"]}}}}"#))
        let (payload, outcome) = render(renderer, ["a": "first", "b": String(repeating: "word ", count: 80)])
        #expect(payload.utf8.count <= 256)
        guard case .truncated = outcome else { Issue.record("expected truncation, got \(outcome)"); return }
        let args = try JSONValue.parse(payload)["aps"]?["alert"]?["loc-args"]
        guard case .array(let items)? = args else { Issue.record("no loc-args"); return }
        #expect(items.first == .string("first"))
        #expect(items.last?.stringValue?.hasSuffix("word…") == true)
    }
}
