"""aiokafka's faces on asyncio: ``AIOKafkaProducer`` and ``AIOKafkaConsumer`` run the async
adapter's producer and consumer (:mod:`kafkastate.adapters.anyio`) in a task that
``start()`` creates and ``stop()`` ends (:mod:`~kafkastate.adapters.asyncio.background`)."""
