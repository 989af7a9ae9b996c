"""What a developer imports to declare and send work: ``@job``
(:mod:`.decorator`), the job function (:mod:`.function`) and its handle
(:mod:`.handle`), the JSON envelope (:mod:`.payload`), the handler's outcomes
(:mod:`.outcomes`) and context (:mod:`.context`), backoff policies
(:mod:`.backoff`) and the path -> job registry (:mod:`.registry`)."""
