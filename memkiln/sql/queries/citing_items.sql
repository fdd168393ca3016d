-- Assistant answers that cite memories (the input of usage counting).
select item_type, role, text, ts
from items
where item_type = 'message'
    and role = 'assistant'
    and contains(text, '<oai-mem-citation>');
